"""Table tests of the structural query scanner, run against both twins (native and reference)."""
from __future__ import annotations

import re

import pytest

from qdrant_guard import GuardArgumentTypeError, GuardArgumentValueError, _impl
from qdrant_guard.scan import KINDS, ScanResult, Violation, scan_query
from tests.oracle import assert_same, both

NATIVE, PYTHON = both("scan")
TWINS = pytest.mark.parametrize("impl", [NATIVE, PYTHON], ids=["native", "python"])


def kinds_at(result: ScanResult) -> list[tuple[str, int]]:
    return [(v.kind, v.position) for v in result.violations]


def test_dispatcher_uses_selected_twin() -> None:
    expected = PYTHON if _impl.implementation() == "python" else NATIVE
    assert scan_query is expected.scan_query
    assert NATIVE.ScanResult is PYTHON.ScanResult is ScanResult
    assert NATIVE.scan_query.__doc__ == PYTHON.scan_query.__doc__


@TWINS
def test_clean_query(impl) -> None:
    r = impl.scan_query("What is the refund policy for annual plans?")
    assert r == ScanResult(True, (), 8, 13, 0.0, 0.0)  # 1+1+1+2+2+1+2+(2+1)


@TWINS
@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("a %41%42 b", [("percent_encoding", 2)]),
        ("a %20 b", []),  # one %XX of a reserved character is below min_percent_run=2
        ("a %41 b", [("percent_encoding", 2)]),  # but an escaped unreserved character hides text
        ("path \\x2e\\x2e/", [("hex_escape", 5)]),
        ("\\u0041\\U0001F600 x", [("unicode_escape", 0)]),
        ("x &lt;&#60;&#x3C; y", [("html_entity", 2)]),
        ("&lt &ltz; &#; &#x; fish&chips", []),  # not character references
        ("key QUJDREVGR0hJSktMTU5PUFFSU1RVVldYWVo5 end", [("base64_blob", 4)]),
        ("sha 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08", [("hex_blob", 4)]),
        ("pneumonoultramicroscopicsilicovolcanoconiosis", []),  # letters only: an ordinary word
        ("12345678901234567890123456789012345", []),  # a long number is not a hex blob
        ("a\x00\x01b", [("control_char", 1)]),
        ("tab\tnew\nline\r ok", []),
        ("x\x7f\x9fy", [("control_char", 1)]),
        ("a\u200bb", [("invisible_char", 1)]),
        ("a\u200db", [("invisible_char", 1)]),  # ZWJ between letters
        ("\ufeffBOM at start", []),
        ("mid\ufeffBOM", [("invisible_char", 3)]),
        ("soft\u00adhyphen word\u2060joiner \u180e", [("invisible_char", 4), ("invisible_char", 16), ("invisible_char", 24)]),
        ("abc\u202eevil", [("bidi_control", 3)]),
        ("\u2066x\u2069 \u200e \u061c", [("bidi_control", 0), ("bidi_control", 2), ("bidi_control", 4), ("bidi_control", 6)]),
        ("tags \U000E0041\U000E0042", [("invisible_char", 5)]),
        ("x\ud800y", [("lone_surrogate", 1)]),
        ("a\ufe00\ufe01\ufe02", [("invisible_char", 2)]),  # a chain of variation selectors
        # invisible operators and deprecated format characters show nothing either
        ("x\u2061y \u2064 f\u206ag\u206f", [("invisible_char", 1), ("invisible_char", 4), ("invisible_char", 7),
                                               ("invisible_char", 9)]),
        ("\u2065 \u2070", []),  # unassigned, and superscript zero: not format characters
        ("\u182d\u180b\u1820 \u1833\u180f", []),  # Mongolian free variation selectors: ordinary Mongolian
    ],
)
def test_violation_table(impl, text, expected) -> None:
    assert kinds_at(impl.scan_query(text)) == expected


@TWINS
@pytest.mark.parametrize(
    "emoji",
    [
        "\U0001F468\u200d\U0001F469\u200d\U0001F467\u200d\U0001F466",  # family
        "\U0001F3F3\ufe0f\u200d\U0001F308",  # rainbow flag
        "\U0001F3F3\ufe0f\u200d\u26a7\ufe0f",  # transgender flag
        "\U0001F469\U0001F3FD\u200d\U0001F4BB",  # woman technologist, medium skin tone
        "\u2764\ufe0f\u200d\U0001F525",  # heart on fire
        "\U0001F44D\U0001F3FF",  # skin tone modifier
        "\U0001F1FA\U0001F1F8",  # regional indicator flag
        "\U0001F3F4\U000E0067\U000E0062\U000E0073\U000E0063\U000E0074\U000E007F",  # Scotland
        "\u2601\ufe0f",  # VS16 after an emoji
    ],
)
def test_emoji_sequences_are_clean(impl, emoji) -> None:
    r = impl.scan_query(f"look {emoji} here {emoji}{emoji}")
    assert r.ok, r.violations


@TWINS
def test_zwj_outside_emoji_is_flagged(impl) -> None:
    assert kinds_at(impl.scan_query("\U0001F468\u200d")) == [("invisible_char", 1)]  # nothing after
    assert kinds_at(impl.scan_query("a\u200d\U0001F469")) == [("invisible_char", 1)]  # letter before
    assert kinds_at(impl.scan_query("\U0001F468\u200dx")) == [("invisible_char", 1)]  # letter after
    assert kinds_at(impl.scan_query("\U0001F468\u200d\u200d\U0001F469")) == [("invisible_char", 1)]
    # tag letters after the black flag that are not an RGI subdivision: hidden text
    hidden = "\U0001F3F4" + "".join(chr(0xE0000 + ord(c)) for c in "secret") + "\U000E007F"
    assert kinds_at(impl.scan_query(hidden)) == [("invisible_char", 1)]


@TWINS
def test_runs_of_one_kind_are_one_violation(impl) -> None:
    r = impl.scan_query("x\x00\x00\x00y")
    assert r.violations == (Violation("control_char", 1, "U+0000 and 2 more"),)
    r = impl.scan_query(b"ab\xff\xfe\xe2\x82 ok")
    assert r.violations == (Violation("invalid_utf8", 2, "byte 0xFF and 3 more"),)


@TWINS
def test_positions_are_code_points_for_str_and_bytes_offsets_for_bytes(impl) -> None:
    text = "héllo wörld \u200b"
    assert kinds_at(impl.scan_query(text)) == [("invisible_char", 12)]
    assert kinds_at(impl.scan_query(text.encode())) == [("invisible_char", 14)]
    assert kinds_at(impl.scan_query("\ud83d\ude00 ok")) == [("lone_surrogate", 0)]


@TWINS
def test_stuffing(impl) -> None:
    r = impl.scan_query("a b c a b c a b c", max_ngram_run=0.9)
    assert r.ngram_run_ratio == 1.0 and r.repetition_ratio == pytest.approx(2 / 3)
    assert kinds_at(r) == [("ngram_run", 0), ("repetition", 6)]
    r = impl.scan_query("alpha beta " + "gamma " * 6 + "delta")
    assert r.ngram_run_ratio == 6 / 9
    assert impl.scan_query("a b a c", max_repetition=None).ngram_run_ratio == 0.0
    assert impl.scan_query("x y x y", max_repetition=None).ngram_run_ratio == 1.0
    assert impl.scan_query("x y x", max_repetition=None).ngram_run_ratio == 0.0  # no full second copy
    r = impl.scan_query("w " * 600, max_repetition=None)
    assert r.token_count == 600 and kinds_at(r) == [("token_cap", 1000)]


@TWINS
def test_model_token_estimate(impl) -> None:
    assert impl.scan_query("abcd abcde").model_token_estimate == 1 + 2
    assert impl.scan_query("can't!").model_token_estimate == 1 + 2  # 4 letters, 2 punctuation
    assert impl.scan_query("東京 😀").model_token_estimate == 3
    r = impl.scan_query("one two three four", max_model_tokens=3)
    assert kinds_at(r) == [("token_cap", 8)]  # 1 + 1 + 2 > 3 at "three"


@TWINS
def test_rules_switched_off(impl) -> None:
    text = "z z z z %41%42 " + "w " * 10
    r = impl.scan_query(
        text, max_tokens=None, max_repetition=None, encoded_payloads=False, min_blob_len=None,
        min_percent_run=None,
    )
    assert r.ok
    assert kinds_at(impl.scan_query(text, max_tokens=3)) == [
        ("repetition", 2), ("token_cap", 6), ("percent_encoding", 8)
    ]


@TWINS
def test_edge_inputs(impl) -> None:
    assert impl.scan_query("") == ScanResult(True, (), 0, 0, 0.0, 0.0)
    assert impl.scan_query(b"   \n") == ScanResult(True, (), 0, 0, 0.0, 0.0)
    assert impl.scan_query("a\u3000b\u00a0c\x85d").token_count == 4  # str.split whitespace


class Sub(str):
    pass


@pytest.mark.parametrize("text", [None, 3, bytearray(b"x"), memoryview(b"x"), ["x"]])
def test_text_type_errors(text) -> None:
    err = assert_same(NATIVE.scan_query, PYTHON.scan_query, text)
    assert isinstance(err, TypeError) and "argument 'text' must be str or bytes" in str(err)


def test_none_safety_of_every_argument() -> None:
    with pytest.raises(TypeError, match="not None"):
        NATIVE.scan_query(None)
    with pytest.raises(TypeError, match="encoded_payloads"):
        NATIVE.scan_query("x", encoded_payloads=None)
    r = NATIVE.scan_query(
        "x", max_tokens=None, max_repetition=None, max_ngram_run=None, max_model_tokens=None,
        min_blob_len=None, min_percent_run=None,
    )
    assert r.ok
    assert NATIVE.scan_query(Sub("a a")) == PYTHON.scan_query("a a")


@pytest.mark.parametrize(
    ("kwargs", "exc", "name"),
    [
        ({"max_tokens": -1}, ValueError, "max_tokens"),
        ({"max_tokens": 1.5}, TypeError, "max_tokens"),
        ({"max_tokens": True}, TypeError, "max_tokens"),
        ({"max_repetition": 1.5}, ValueError, "max_repetition"),
        ({"max_repetition": float("nan")}, ValueError, "max_repetition"),
        ({"max_repetition": "0.5"}, TypeError, "max_repetition"),
        ({"max_ngram_run": -0.1}, ValueError, "max_ngram_run"),
        ({"encoded_payloads": 1}, TypeError, "encoded_payloads"),
        ({"max_model_tokens": -5}, ValueError, "max_model_tokens"),
        ({"min_blob_len": 7}, ValueError, "min_blob_len"),
        ({"min_percent_run": 0}, ValueError, "min_percent_run"),
    ],
)
def test_bad_rules(kwargs, exc, name) -> None:
    err = assert_same(NATIVE.scan_query, PYTHON.scan_query, "x", **kwargs)
    # The project's own subclass of the builtin (a QdrantGuardError too), the same in both twins.
    want = GuardArgumentValueError if exc is ValueError else GuardArgumentTypeError
    assert type(err) is want and isinstance(err, exc) and f"'{name}'" in str(err)


def test_accepts_int_like_and_int_ratios() -> None:
    import numpy as np

    r = assert_same(NATIVE.scan_query, PYTHON.scan_query, "a a b", max_tokens=np.int64(2), max_repetition=0)
    assert kinds_at(r) == [("repetition", 2), ("token_cap", 4)]


def test_kinds_listed() -> None:
    assert len(set(KINDS)) == 15


# The lesson's validator: str.split, a set, one regex. Our scan must agree with it on its own ground.
_LESSON = re.compile(r"%[0-9a-fA-F]{2}|\\x[0-9a-fA-F]{2}")


def lesson_validate(query: str, max_tokens: int = 500, max_repetition: float = 0.5) -> set[str]:
    tokens = query.split()
    found = set()
    if len(tokens) > max_tokens:
        found.add("token_cap")
    if tokens and 1 - len(set(tokens)) / len(tokens) > max_repetition:
        found.add("repetition")
    if _LESSON.search(query):
        found.add("encoded")
    return found


@TWINS
@pytest.mark.parametrize(
    "query",
    [
        "What were the Q3 revenue numbers for the EMEA region?",
        "revenue " * 40,
        "word " * 501,
        " ".join(f"w{i}" for i in range(501)),
        "show me %2e%2e%2f%2e%2e%2fetc",
        "decode \\x41\\x42 please",
        "summarize the Q3 board memo on the pending acquisition",
    ],
)
def test_agrees_with_lesson_validator(impl, query) -> None:
    ours = impl.scan_query(query, min_percent_run=1)
    assert ours.token_count == len(query.split())
    expected = lesson_validate(query)
    kinds = {v.kind for v in ours.violations}
    assert ("token_cap" in kinds) == ("token_cap" in expected)
    assert ("repetition" in kinds) == ("repetition" in expected)
    assert bool(kinds & {"percent_encoding", "hex_escape"}) == ("encoded" in expected)


def test_scans_on_several_threads_agree() -> None:
    """Scans on four threads at once, of texts over the no-GIL size (64 KiB: each scan's own token
    table index) and under it (the index shared under the GIL), with vocabularies below and above
    the 512 tokens where the table moves to the heap, give the results of scans one at a time."""
    import random
    from concurrent.futures import ThreadPoolExecutor

    rng = random.Random(11)
    words = [f"w{i}" for i in range(40)]
    texts = [" ".join(rng.choice(words) for _ in range(rng.randrange(12_000, 30_000)))
             + " " + " ".join(f"u{i}" for i in range(extra))
             for extra in (0, 100, 480, 520, 3000, 0, 700, 50)]
    texts.append("tiny text")
    want = [NATIVE.scan_query(t, max_tokens=None) for t in texts]
    for t, w in zip(texts[::3], want[::3]):
        assert w == PYTHON.scan_query(t, max_tokens=None)

    def work(k: int) -> list[int]:
        order = [(k + r) % len(texts) for r in range(12)]
        return [i for i in order if NATIVE.scan_query(texts[i], max_tokens=None) != want[i]]

    with ThreadPoolExecutor(max_workers=4) as pool:
        wrong = [i for found in pool.map(work, range(4)) for i in found]
    assert wrong == []


def test_scans_in_turn_leave_the_shared_index_clean() -> None:
    """Scans under the no-GIL size share one token table index, which each leaves zeroed: texts in
    turn with vocabularies on both sides of the 512 tokens where the table moves to the heap (each
    scan clears the slots it filled, all 512 after such a move), each twice, agree with the
    reference."""
    import random

    rng = random.Random(13)
    for distinct in (3, 511, 512, 513, 40, 900, 1, 200, 2000, 7):
        words = [f"t{distinct}x{i}" for i in range(distinct)]
        text = " ".join(words + [rng.choice(words) for _ in range(300)])
        assert len(text) < 1 << 16
        want = PYTHON.scan_query(text, max_tokens=None)
        assert NATIVE.scan_query(text, max_tokens=None) == want
        assert NATIVE.scan_query(text, max_tokens=None) == want
