"""Oracle tests: the native detector equals the pure-Python reference on adversarial text."""
from __future__ import annotations

import json
import random
import threading
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.oracle import assert_same, both

NATIVE, PYTHON = both("detect")
CORPUS = Path(__file__).parent / "data" / "planted_secrets.jsonl"

# Fragments that sit on the detectors' edges: valid secrets, near misses and separators.
PIECES = [
    "SSN 123-45-6789", "ssn 123456789", "social security", "4111 1111 1111 1111", "3782 822463 10005",
    "DE89 3704 0044 0532 0130 00", "GB82WEST12345698765432", "john.doe@corp.io", "(555) 123-4567",
    "555-123-4567", "1-800-555-0100", "+44 20 7946 0958", "AKIAZ2Q3W4E5R6T7Y3U4", "AKIAIOSFODNN7EXAMPLE",
    "aws_secret_access_key = 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", "Kq2mZ8vT4xR/nW1pL6yB3cH9dF0gJ5sA2eU8iO+t",
    "ghp_0123456789abcdefghijklmnopqrstuvwxyz", "github_pat_11ABCDEFG0abcdefghijkl_" + "Ab1" * 19 + "Zz",
    "glpat-abcdefghij0123456789", "xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx",
    "https://hooks.slack.com/services/T00000000/B00000000/XXXXXXXXabcdefghXXXXXXXX", "sk_live_4eC39HqLyjWDarjtT1zdp7dc",
    "sk-proj-Ab3dEf7hIj9kLmN0pQrStUvWxYz123456789", "sk-ant-api03-Ab3dEf7hIj9kLmN0pQrStUvWxYz1234567",
    "AIzaSyA1b2C3d4E5f6G7h8I9j0K_L-m3N4o5P6q", "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",
    "npm_Ab3dEf7hIj9kLmN0pQrStUvWxYz123456789", "pypi-AgEIcHlwaS5vcmc" + "CJGE0ZjM3YjM0LWQ5ZWQtNGQ0Mi1hY2Yy" * 2,
    "SG.Ab3dEf7hIj9kLmN0pQ_rSt.Uv-WxYz123456789Ab3dEf7hIj9kLmN0pQrStUvWxYz", "SK2f9c0e4b7d1a8f3e6c5b2a9d8e7f6a5b",
    "hf_AbCdEfGhIjKlMnOpQrStUvWxYzAbCdEfGh", "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", "dop_v1_" + "1a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6d" * 2,
    "key-1a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6d", "dapi1a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6d-2",
    "PMAK-1a2b3c4d5e6f7a8b9c0d1e2f-1a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6d7e", "lin_api_Ab3dEf7hIj9kLmN0pQrStUvWxYz1234567890abc",
    "dp.st.dev.bAqhcVzrhy5cRHkOlNTc0Ve6w5NUDCpcutm8vGE9myi", "xapp-1-A0123456789-1234567890123-" + "1a2b3c4d" * 8,
    "AccountName=a;AccountKey=BwgJCgsMDQ4PEBESExQVFhcYGRobHB0eHyAhIiMkJSYnKCkqKywtLi8wMTIzNDU2Nzg5Ojs8PT4/QEFCQ0RFRg==;", "auth_provider: google-oauth2-provider", "<key_status>v2-Ab</key_status>",
    "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
    "postgres://app:S3cr3t#Pw!@db.internal:5432/x", "redis://:password@h", 'API_KEY = "Zk29fjA01kd8Gh3LmQ9x"',
    "password: Hq8#kLm2$pQr9vXz", "clientSecret := 'q8W#e2R!t6Y@u0I$o4P'",
    "-----BEGIN RSA PRIVATE KEY-----\nMIIEabc\n-----END RSA PRIVATE KEY-----", "-----BEGIN EC PRIVATE KEY-----\nMHcC+/=\n",
    "550e8400-e29b-41d4-a716-446655440000", "da39a3ee5e6b4b0d3255bfef95601890afd80709", "v2.0.1-rc1", "2024-01-15",
    # found by the native mutation pass (tests/test_mutants_native_detect.py)
    '"9b2f4e1a-7c3d-4a5b-8e6f-0d1c2b3a4f5e"', "AT61 1904 3002 3457 3201", "ssn 900123456", "SSN 899-12-3456",
    "aws secret KQ2MZ8VT4XR/NW1PL6YB3CH9DF0GJ5SA2EU8IO+T", "Hq8#****$pQr9vXz",
    # the second native mutation pass (tests/test_mutants_native_detect.py (second-pass cases))
    "4111 7392 0184 650", "4111-7392-0184-650", "4111 7392 0184 7", "2220739201846576", "2221739201846575",
    "2720739201846571", "2721739201846570", "347392018465735", "GB82 WEST 1234 5698 76543 2",
    "GB82 WEST 1234 5698 7654 3210", "GB82 WES T123 4569 8765 432",
    # the third native mutation pass (tests/test_mutants_native_detect.py (third-pass cases))
    "a" * 64 + "@corp.io", "@corp.io", "john.@corp.io", ".john@corp.io", "a@" + "b" * 63 + ".io", "a@" + "b" * 64 + ".io",
    "a@-corp.io", "a@corp-.io", "://u@corp.io", "https://example.com/ a@corp.io", "+12345678", "+1234567",
    "+1234567890123456", "1-255-123-4567", "(555)123-4567", "(555) 123.4567", "(555)x123-4567", "1 555 123 4567 8", "4111739201846573015", "+44-20-79-46-09-58 1", "6447392018465731", "3528739201846573", "3590739201846576",
    "é", "😀", "👩\u200d👩\u200d👧", "\ud800", "\udfff", "\x00", " ", "\n", "\t", "=", ":", "@", "-", ".", "/", "'", '"',
    "(", ")", "+", "1", "9", "A", "eyJ", "://", "-----BEGIN ", "x", "K", "\u212a",
    # the fifth native mutation pass (tests/test_mutants_native5.py): IBAN check digits and BBAN letters
    "GB5KWEST12345698765432", "gb75 west abcd efgh ijkl mn", "gb10 5est abcd efgh ijkl mn",
]
ALPHABET = "aAzZ0129 -_.:/=@+()'\"\n\t#$é😀\ud800\x00kKsSxXgGyJ\u212aGhnpfdPMblQw"


@st.composite
def planted_text(draw: st.DrawFn) -> str:
    parts = []
    for _ in range(draw(st.integers(0, 12))):
        kind = draw(st.integers(0, 2))
        if kind == 0:
            parts.append(draw(st.sampled_from(PIECES)))
        elif kind == 1:
            parts.append(draw(st.text(alphabet=ALPHABET, max_size=8)))
        else:  # a piece with one edit: the near misses
            piece = draw(st.sampled_from(PIECES))
            i = draw(st.integers(0, len(piece)))
            j = draw(st.integers(i, len(piece)))
            parts.append(piece[:i] + draw(st.text(alphabet=ALPHABET, max_size=2)) + piece[j:])
    return "".join(parts)


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(planted_text())
def test_oracle_planted(text: str) -> None:
    assert_same(NATIVE.find_spans, PYTHON.find_spans, text)


@settings(max_examples=500, deadline=None)
@given(st.text(max_size=300))
def test_oracle_random_unicode(text: str) -> None:
    assert_same(NATIVE.find_spans, PYTHON.find_spans, text)


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.characters(codec="ascii"), max_size=400))
def test_oracle_random_ascii(text: str) -> None:
    assert_same(NATIVE.find_spans, PYTHON.find_spans, text)


def test_oracle_corpus() -> None:
    for line in CORPUS.read_text(encoding="utf-8").splitlines():
        assert_same(NATIVE.find_spans, PYTHON.find_spans, json.loads(line)["text"])


def _megabyte() -> str:
    rng = random.Random(7)
    parts = []
    size = 0
    while size < 1 << 20:
        p = rng.choice(PIECES) if rng.random() < 0.3 else "".join(rng.choice(ALPHABET) for _ in range(rng.randint(1, 40)))
        parts.append(p)
        size += len(p)
    return "".join(parts)


def test_oracle_one_megabyte() -> None:
    text = _megabyte()
    result = assert_same(NATIVE.find_spans, PYTHON.find_spans, text)
    assert len(result) > 1000  # the planted pieces were found, not just an empty agreement


def test_native_threads_agree() -> None:
    # The native scan releases the GIL on large input; concurrent scans must not interfere.
    text = _megabyte()[: 1 << 18]
    expected = NATIVE.find_spans(text)
    results: list[object] = [None] * 4

    def run(k: int) -> None:
        results[k] = NATIVE.find_spans(text)

    threads = [threading.Thread(target=run, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(r == expected for r in results)


def test_pathological_inputs_agree() -> None:
    cases = [
        "@" * 5000, "a@" * 3000, "1 " * 5000, "1-" * 5000 + "1", "=" * 3000, "key=" * 2000, ":" * 3000,
        "-----BEGIN RSA PRIVATE KEY-----" * 500, "eyJ." * 2000, "://" * 2000, "A" * 10000, "9" * 10000,
        "x" * 100000 + "@corp.io", "key = '" + "Ab1" * 300 + "'", "\ud800" * 1000 + "123-45-6789",
        # one cluster of thousands of overlapping candidates: each address's domain starts the next
        # one's local part (the pairwise overlap check made this quadratic: 0.4 s at 256 KB)
        "@a.io%" * 3000, "a.b@c.de." * 2000, "@a.io%123-45-6789-" * 500,
    ]
    for text in cases:
        assert_same(NATIVE.find_spans, PYTHON.find_spans, text)


# Clusters of overlapping candidates larger than the native pairwise check takes
# (RESOLVE_PAIRWISE_MAX = 32 in native/detect.c): in "@a.io%@a.io%..." each address's domain
# starts the next one's local part; the links put other types and lengths into the chain.
UNITS = ["@a.io%", "@bb.com%1", "@c.io-x%", "@d.org."]
LINKS = ["@b.co", "x.y@corp.io.", "123-45-6789", "555-123-4567", "1", "%", "4111111111111111", "+1-",
         "é", " ", ".", "-", "@", "key=Zk29fjA01kd8Gh3LmQ9x"]


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.sampled_from(UNITS), st.integers(1, 60), st.sampled_from(LINKS)), max_size=8))
def test_oracle_large_clusters(segments: list[tuple[str, int, str]]) -> None:
    assert_same(NATIVE.find_spans, PYTHON.find_spans, "".join(u * n + link for u, n, link in segments))


def _dispatcher_spans_hold(text: str) -> None:
    """Both kernels agree through the dispatcher's extra views; findings are sorted,
    non-overlapping and in bounds, and cover every finding of the plain scan (views only add),
    but for the letters of an escape a plain finding starts inside, where the decoded view's
    finding starts right after that escape (``&nbsp123-45-6789x@y.io``: the ``nbsp`` is syntax, and
    cutting the escape would break the string that holds it; review 49)."""
    from qdrant_guard.detect import _escapes, _find_spans, _triggers

    got = assert_same(lambda t: _find_spans(t, NATIVE.find_spans), lambda t: _find_spans(t, PYTHON.find_spans), text)
    assert got == sorted(got)
    for (s1, e1, _, _), (s2, _, _, _) in zip(got, got[1:]):
        assert e1 <= s2
    assert all(0 <= s < e <= len(text) for s, e, _, _ in got)
    escapes = _escapes(text, _triggers(text))
    for s, e, _, _ in PYTHON.find_spans(text):
        starts = [b for a, b, _, _ in escapes if a < s < b < e]  # the end of an escape s is inside
        assert any((gs <= s or gs in starts) and e <= ge for gs, ge, _, _ in got), (text, (s, e), got)


FOLD_CHARS = "\u00a0\u200b\u00ad\u2011\u2013\u202f\u3000\uff11\uff21\uff20\u0663\u0301\ufeff\U0001d7ed\U000e0041"


@settings(max_examples=800, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(planted_text(), st.lists(st.tuples(st.integers(0, 10_000), st.sampled_from(FOLD_CHARS)), max_size=6))
def test_oracle_folded_view(text: str, inserts: list[tuple[int, str]]) -> None:
    # Unicode the folded view changes, inserted anywhere: both kernels still agree through the
    # dispatcher, findings stay sorted, non-overlapping and in bounds, and every finding of the
    # plain scan is still covered (folding only adds).
    for pos, ch in inserts:
        pos %= len(text) + 1
        text = text[:pos] + ch + text[pos:]
    _dispatcher_spans_hold(text)


def _encode(piece: str, how: int) -> str:
    import base64

    raw = piece.encode()
    if how == 0:
        return base64.b64encode(raw).decode()
    if how == 1:
        return "0x" + raw.hex()
    return "".join(
        (f"%{b:02X}", f"\\x{b:02x}", f"\\u{b:04x}", f"&#{b};", f"&#x{b:x};", chr(b))[(how + i) % 6]
        for i, b in enumerate(raw)
    )


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(planted_text(), st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 10_000), st.integers(0, 7)),
                                max_size=4))
def test_oracle_decoded_views(text: str, encodings: list[tuple[int, int, int]]) -> None:
    # Stretches of a planted text encoded (base64, hex, escapes of every kind, mixed): both kernels
    # agree through the dispatcher, findings stay sorted, non-overlapping and in bounds, and every
    # finding of the plain scan is still covered (decoding only adds).
    for a, b, how in encodings:
        a, b = sorted((a % (len(text) + 1), b % (len(text) + 1)))
        if text[a:b].isascii():
            text = text[:a] + _encode(text[a:b], how) + text[b:]
    _dispatcher_spans_hold(text)


ESCAPED_FOLD_CHARS = [
    "&nbsp;", "&nbsp", "&shy", "&ndash;", "&#150;", "&#x2011;", "&#0000065297;", "\\u00a0", "\\u200b",
    "\\ud835\\udfcf", "\\udb40\\udc41", "\\ud835", "\\n", "\\t", "\\/", '\\"', "%20", "%C2%A0",
]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(planted_text(), st.lists(st.tuples(st.integers(0, 10_000), st.sampled_from(ESCAPED_FOLD_CHARS)),
                                max_size=6))
def test_oracle_escapes_of_folded_characters(text: str, inserts: list[tuple[int, str]]) -> None:
    # Escapes the escape view decodes to characters its folded view sees through (and JSON's
    # one-character escapes, surrogate pairs, references without ';'), inserted anywhere.
    for pos, esc in inserts:
        pos %= len(text) + 1
        text = text[:pos] + esc + text[pos:]
    _dispatcher_spans_hold(text)


def _pairwise_greedy(cands: list[tuple[int, int, str, str]]) -> list[tuple[int, int, str, str]]:
    # The overlap rule as first written: by priority, take what overlaps nothing taken.
    taken: list[tuple[int, int, str, str]] = []
    for c in sorted(set(cands), key=lambda c: (c[0] - c[1], PYTHON._RANK[c[2]], c[0], c[3])):
        if all(c[1] <= t[0] or t[1] <= c[0] for t in taken):
            taken.append(c)
    return sorted(taken)


@settings(max_examples=500, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 60), st.integers(1, 20), st.sampled_from(["SSN", "EMAIL", "PHONE", "JWT"]),
                          st.sampled_from(["format", "luhn"])), max_size=80))
def test_reference_resolve_is_the_pairwise_greedy(raw: list[tuple[int, int, str, str]]) -> None:
    cands = [(s, s + n, t, v) for s, n, t, v in raw]
    assert PYTHON._resolve(cands) == _pairwise_greedy(cands)


# Space-separated lists of numbers: the list-prefix rule and its check against later numbers'
# findings (a prefix must not end inside one) in both twins.
NUMBERS = ["4111111111111111", "4111", "1111", "4000", "1005", "123", "45", "6789", "555", "4567", "1",
           "234", "56", "7890", "5555", "4444", "12", "0", "99", "+1", "(555)", "ssn"]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(NUMBERS), min_size=2, max_size=14), st.sampled_from([" ", " ", "-", "."]))
def test_oracle_number_lists(numbers: list[str], sep: str) -> None:
    assert_same(NATIVE.find_spans, PYTHON.find_spans, sep.join(numbers))
