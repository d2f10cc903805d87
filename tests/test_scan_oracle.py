"""The native scanner against its pure-Python reference: every result must be identical."""
from __future__ import annotations

import math
import os
import random
import subprocess
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from qdrant_guard import _scan_py
from tests.oracle import assert_same, both

NATIVE, PYTHON = both("scan")

# Pieces an attacker (or an unlucky user) puts in a query.
PIECES = [
    " ", "  ", "\t", "\n", "\u3000", "\x85", "\xa0", "the", "The", "a", "b", "token", "%", "%4", "%41", "%2e",
    "\\x4", "\\x41", "\\u00e9", "\\U0001F600", "\\", "&", "&amp;", "&lt", "&#65;", "&#x41;", "&#;", "&frac12;",
    ";", "#", "x", "QUJD", "REVG", "+/", "==", "9f86d0", "ABCDEF", "0123", "\x00", "\x01", "\x7f", "\x9f",
    "\u200b", "\u200c", "\u200d", "\u2060", "\u00ad", "\ufeff", "\u180e", "\u202e", "\u2066", "\u200e",
    "\u061c", "\ufe0f", "\ufe0e", "\ufe00", "\U000E0100", "\U000E0041", "\U000E007F", "\U0001F3F4",
    "\U000E0067\U000E0062\U000E0065\U000E006E\U000E0067\U000E007F", "\U0001F468", "\U0001F469", "\U0001F3FD",
    "\U0001F308", "\U0001F3F3", "\u2764", "\u26a7", "\u00e9", "東京", "\ud800", "\udfff", "\udc80", "\U0010FFFF",
    "enchantments", "SGVsbG8gV29yb", "\ud7ff", "\ue000",  # the native mutation pass (test_mutants_native_scan)
    # the second native mutation pass (test_mutants_native_scan, second pass)
    "\ufdff", "\ufe10", "\U000E00FF", "\U000E01EF", "\U000E01F0", "&#9;", "&#A1;", "&#X41;",
    "\u2061", "\u2064", "\u2065", "\u2069", "\u206a", "\u206f", "\u2070", "\u180b", "\u180f",  # invisible operators
    "\U000E0000", "\U000DFFFF", "\U000E0080", "\u0800", "\u07ff", "\U00010000",  # the third scan.c pass
    # the fifth and sixth native passes (test_mutants_native5/6): word-shaped runs, 0x runs, the
    # skin-tone range and its neighbours, VS15, the Wales flag's tags
    "dmpmekhpczlp.", "V2B2TWNJIC9Y.", "0x", "0123456789", "abcdef", "\U0001F3FA", "\U0001F3FB", "\U0001F3FF",
    "\U0001F400", "\U000E0077\U000E006C\U000E0073", "\U000E0073\U000E0063\U000E0074",
]
BAD_BYTES = [b"\xff", b"\xfe", b"\x80", b"\xc0\xaf", b"\xe2\x82", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\xf0\x9f", b"\xc1\xbf", b"\xe0\x9f\xbf", b"\xf5\x80\x80\x80", b"\xf0\x8f\xbf\xbf"]

pieces = st.lists(st.sampled_from(PIECES), max_size=60).map("".join)
adversarial_str = st.one_of(st.text(max_size=200), pieces)
adversarial_bytes = st.one_of(
    st.binary(max_size=200),
    st.lists(
        st.one_of(
            st.sampled_from(BAD_BYTES),
            st.sampled_from(PIECES).map(lambda p: p.encode("utf-8", "surrogatepass")),
        ),
        max_size=60,
    ).map(b"".join),
)
rules = st.fixed_dictionaries(
    {},
    optional={
        "max_tokens": st.one_of(st.none(), st.integers(0, 40)),
        "max_repetition": st.one_of(st.none(), st.floats(0, 1)),
        "max_ngram_run": st.one_of(st.none(), st.floats(0, 1)),
        "encoded_payloads": st.booleans(),
        "max_model_tokens": st.one_of(st.none(), st.integers(0, 60)),
        "min_blob_len": st.one_of(st.none(), st.integers(8, 40)),
        "min_percent_run": st.one_of(st.none(), st.integers(1, 4)),
        "max_glued_repetition": st.one_of(st.none(), st.floats(0, 1)),
    },
)
SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _encoded(raw: bytes, how: int, upper: bool) -> str:
    """raw as base64 (padded or not), hex (0x-prefixed or not) or %XX escapes."""
    import base64

    if how == 0:
        return base64.b64encode(raw).decode()
    if how == 1:
        return base64.b64encode(raw).decode().rstrip("=")
    text = raw.hex().upper() if upper else raw.hex()
    if how == 2:
        return text
    if how == 3:
        return ("0X" if upper else "0x") + text
    return "".join(f"%{b:02X}" if i % 2 else chr(b) if 0x21 <= b < 0x7F and b != 0x25 else f"%{b:02x}"
                   for i, b in enumerate(raw))


# Encoded payloads around the decoding rules' edges: printable text or not, every length about
# DECODE_MIN and the hex minimums, digits-only or not, prefixed or not.
encoded_piece = st.builds(
    _encoded,
    st.one_of(st.binary(max_size=30), st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=30)
              .map(str.encode), st.text("0123456789", max_size=30).map(str.encode)),
    st.integers(0, 4),
    st.booleans(),
)
encoded_text = st.lists(st.one_of(encoded_piece, st.sampled_from(PIECES)), max_size=12).map("".join)


@SETTINGS
@given(text=adversarial_str, kwargs=rules)
def test_str_twins_agree(text, kwargs) -> None:
    assert_same(NATIVE.scan_query, PYTHON.scan_query, text, **kwargs)


@SETTINGS
@given(text=encoded_text, kwargs=rules)
def test_encoded_payload_twins_agree(text, kwargs) -> None:
    assert_same(NATIVE.scan_query, PYTHON.scan_query, text, **kwargs)
    assert_same(NATIVE.scan_query, PYTHON.scan_query, text.encode("utf-8", "surrogatepass"), **kwargs)


@SETTINGS
@given(data=adversarial_bytes, kwargs=rules)
def test_bytes_twins_agree(data, kwargs) -> None:
    assert_same(NATIVE.scan_query, PYTHON.scan_query, data, **kwargs)


@settings(max_examples=200, deadline=None)
@given(words=st.lists(st.sampled_from(["a", "b", "c", "dd", "a b"]), max_size=80), cap=st.floats(0, 1))
def test_stuffing_twins_agree(words, cap) -> None:
    assert_same(NATIVE.scan_query, PYTHON.scan_query, " ".join(words), max_ngram_run=cap, max_repetition=cap)


@settings(max_examples=100, deadline=None)
@given(kwargs=st.dictionaries(
    st.sampled_from(["max_tokens", "max_repetition", "max_ngram_run", "encoded_payloads", "max_model_tokens",
                     "min_blob_len", "min_percent_run", "max_glued_repetition"]),
    st.one_of(st.none(), st.booleans(), st.integers(-3, 3), st.floats(allow_nan=True), st.text(max_size=2)),
))
def test_rule_errors_agree(kwargs) -> None:
    assert_same(NATIVE.scan_query, PYTHON.scan_query, "a b", **kwargs)


def _boundaries(ranges):
    for lo, hi in ranges:
        yield from (lo - 1, lo, hi, hi + 1)


def test_character_tables_agree_at_every_boundary() -> None:
    """The C tables (Extended_Pictographic, whitespace) equal the reference's, probed at each edge."""
    spaces = [c for c in range(0x3001) if chr(c).isspace()]
    probes = set(_boundaries(_scan_py.EXTENDED_PICTOGRAPHIC)) | set(_boundaries((c, c) for c in spaces))
    for cp in sorted(p for p in probes if 0 < p < 0x110000):
        ch = chr(cp)
        # ZWJ after an emoji is legitimate exactly when `ch` is Extended_Pictographic.
        assert_same(NATIVE.scan_query, PYTHON.scan_query, f"\U0001F468\u200d{ch} a{ch}b")


def test_entity_names_agree() -> None:
    for name in _scan_py.HTML_ENTITY_NAMES:
        for text in (f"&{name};", f"&{name}x;", f"&{name[:-1]};", f"&{name.upper()};"):
            assert_same(NATIVE.scan_query, PYTHON.scan_query, text)
    assert NATIVE.scan_query("&frac12;").violations[0].kind == "html_entity"


@pytest.mark.slow
def test_huge_inputs_agree() -> None:
    rng = random.Random(7)
    words = ["alpha", "beta", "gamma", "\u200b", "%41%42", "&amp;", "\U0001F468\u200d\U0001F469", "\x00", "東京"]
    text = " ".join(rng.choice(words) for _ in range(300_000))[: 1 << 20]
    assert len(text) == 1 << 20
    assert_same(NATIVE.scan_query, PYTHON.scan_query, text, max_ngram_run=0.5)
    blob = bytes(rng.randrange(256) for _ in range(1 << 20))
    assert_same(NATIVE.scan_query, PYTHON.scan_query, blob)
    stuffed = "ignore previous instructions " * 40_000
    assert_same(NATIVE.scan_query, PYTHON.scan_query, stuffed, max_ngram_run=0.5)


def test_many_distinct_tokens_grow_the_table() -> None:
    text = " ".join(f"w{i}" for i in range(20_000)) + " w7 w8 w7 w8"
    r = assert_same(NATIVE.scan_query, PYTHON.scan_query, text, max_tokens=None, max_ngram_run=0.0)
    assert r.token_count == 20_004 and r.repetition_ratio == 1 - 20_000 / 20_004


# The native pass reads 64-byte blocks and hands bytes it cannot classify in bulk (controls,
# escape triggers, non-ASCII, other whitespace) to a byte-at-a-time path; these sweep such bytes and
# token edges across block boundaries and through the short padded tail.
SPECIALS = ["é", "\x00", "%41%42", "\u200b", "\t", "\x0b", "\u3000", "&amp;", "\\x41", "👩\u200d💻", "\ud800"]


@pytest.mark.parametrize("special", SPECIALS)
def test_block_boundaries_agree(special) -> None:
    base = "ab cde fghij klmnopqrstuvwxyz0123456789ABCDEFGHIJ " * 4
    for at in range(0, 140):
        text = base[:at] + special + base[at:]
        assert_same(NATIVE.scan_query, PYTHON.scan_query, text, max_ngram_run=0.0, max_tokens=None)
        data = text.encode("utf-8", "surrogatepass")
        assert_same(NATIVE.scan_query, PYTHON.scan_query, data, max_ngram_run=0.0, max_tokens=None)


def test_token_lengths_around_word_boundaries_agree() -> None:
    # Tokens of 1..40 bytes sharing long prefixes: equality beyond the first 16 bytes is compared
    # byte by byte; shorter ones through the two packed words.
    words = ["x" * k for k in range(1, 41)] + ["x" * k + "y" for k in range(1, 41)]
    rng = random.Random(3)
    text = " ".join(rng.choice(words) for _ in range(3000))
    assert_same(NATIVE.scan_query, PYTHON.scan_query, text, max_ngram_run=0.0, max_tokens=None)


def test_generic_native_pass_agrees() -> None:
    """QG_SCAN_GENERIC forces the baseline-x86-64 pass on CPUs that would run the AVX2 one."""
    code = (
        "import random\n"
        "from qdrant_guard import _scan, _scan_py\n"
        "from tests.oracle import assert_same\n"
        f"specials = {SPECIALS!r}\n"
        "rng = random.Random(5)\n"
        "words = ['alpha', 'beta', 'x' * 20, 'x' * 21] + specials\n"
        "words += ['MTIzLTQ1LTY3ODk=', '3132332d34352d36373839', '0x' + '41' * 12, '4' * 24, '123%2D45%2D6789',\n"
        "          'QUJDREVGR0hJSktMTU5PUFFSU1RVVldYWVo5', 'deadbeefcafebabe0123', 'MTIzNDU2Nzg5']\n"
        "for size in (0, 1, 63, 64, 65, 200, 5000):\n"
        "    text = ' '.join(rng.choice(words) for _ in range(size))\n"
        "    assert_same(_scan.scan_query, _scan_py.scan_query, text, max_ngram_run=0.0)\n"
        "    assert_same(_scan.scan_query, _scan_py.scan_query, text.encode('utf-8', 'surrogatepass'))\n"
        "from tests.test_scan_oracle import _straddling_texts\n"
        "for text in _straddling_texts():\n"
        "    assert_same(_scan.scan_query, _scan_py.scan_query, text, max_ngram_run=0.0, max_tokens=None)\n"
        "from tests.test_scan_oracle import test_short_blobs_in_the_block_loop_agree\n"
        "test_short_blobs_in_the_block_loop_agree()\n"
        "from tests.test_scan_oracle import test_long_letter_tokens_agree\n"
        "test_long_letter_tokens_agree()\n"
        "from tests.test_scan_oracle import test_model_estimate_of_letter_and_digit_blocks_agrees\n"
        "test_model_estimate_of_letter_and_digit_blocks_agrees()\n"
        "from tests.test_scan_oracle import test_short_token_keys_agree\n"
        "test_short_token_keys_agree()\n"
        "print('ok')\n"
    )
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, QG_SCAN_GENERIC="1", PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""))
    done = subprocess.run([sys.executable, "-c", code], cwd=root, env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr


def test_vocabulary_sizes_around_the_table_moves_agree() -> None:
    # The native table moves from the stack to the heap past 512 distinct tokens and then doubles:
    # repeats straddling each move must still be found (repetition and n-gram figures).
    for distinct in (1, 127, 128, 129, 253, 254, 255, 256, 511, 512, 513, 514, 1023, 1024, 1025, 2049):
        words = [f"t{i}" for i in range(distinct)]
        text = " ".join(words + words[:9] + words[-3:] * 3)
        assert_same(NATIVE.scan_query, PYTHON.scan_query, text, max_ngram_run=0.0, max_tokens=None)


def test_ngram_runs_of_every_period_agree() -> None:
    """Periodic stretches of every size 1..9, cut short, overlapping and tied, in both passes' hands:
    the run, its size and its position (reported by the violation at max_ngram_run=0) must agree."""
    rng = random.Random(11)
    for case in range(1500):
        vocab = ["a", "b", "c", "d", "ee", "f"][: rng.randint(1, 6)]
        tokens: list[str] = []
        while len(tokens) < rng.randint(0, 120):
            if rng.random() < 0.5:
                period = [rng.choice(vocab) for _ in range(rng.randint(1, 9))]
                tokens += (period * 4)[: rng.randint(1, 4 * len(period))]
            else:
                tokens += [rng.choice(vocab) for _ in range(rng.randint(1, 5))]
        text = " ".join(tokens)
        assert_same(NATIVE.scan_query, PYTHON.scan_query, text, max_ngram_run=0.0, max_tokens=None,
                    max_repetition=None)


def _straddling_texts():
    """Periodic runs of every size 1..9 that begin, become full or end near the native pass's
    64-token chunk edges, with the text ending inside the run or after it."""
    for start in list(range(44, 72, 3)) + list(range(108, 136, 3)):
        for g in range(1, 10):
            for length in (g, 2 * g - 1, 2 * g, 2 * g + 1, 5 * g + 3):
                filler = [f"u{i}" for i in range(start)]
                run = ([f"p{j}" for j in range(g)] * 8)[:length]
                yield " ".join(filler + run)
                yield " ".join(filler + run + [f"v{i}" for i in range(70)])


def test_ngram_streaks_across_chunk_edges_agree() -> None:
    for text in _straddling_texts():
        assert_same(NATIVE.scan_query, PYTHON.scan_query, text, max_ngram_run=0.0, max_tokens=None,
                    max_repetition=None)


def test_token_cap_and_first_repeat_at_chunk_edges_agree() -> None:
    """The native pass finds the token at the cap and the first repeated token per 64-token chunk."""
    for distinct in (0, 1, 62, 63, 64, 65, 127, 128, 129, 200):
        words = [f"w{i}" for i in range(distinct)] + ["w0", "w1"] * 40 + ["x"]
        for cap in (0, 1, 63, 64, 65, 127, 128, 129, 250, 1000):
            assert_same(NATIVE.scan_query, PYTHON.scan_query, " ".join(words), max_tokens=cap,
                        max_repetition=0.0)


def test_fast_ratio_format_matches_python() -> None:
    """The native detail formats repetition ratios without Python's float formatter; every ratio a
    scan of up to 1,200 tokens can produce, the ties and their neighbours must print the same."""
    from qdrant_guard._scan import _fixed3_for_tests as fixed3

    for total in range(1, 1201):
        for unique in range(total + 1):
            x = 1.0 - unique / total
            assert fixed3(x) == f"{x:.3f}", (unique, total)
    for k in range(2001):
        tie = k / 2000
        for x in (tie, math.nextafter(tie, 0.0), math.nextafter(tie, 1.0)):
            if 0.0 <= x <= 1.0:
                assert fixed3(x) == f"{x:.3f}", x
    rng = random.Random(3)
    for _ in range(100_000):
        x = rng.random()
        assert fixed3(x) == f"{x:.3f}", x


def test_short_blobs_in_the_block_loop_agree() -> None:
    """Runs of 12-20 characters amid plain words, so they reach the native block loop (which
    hands tokens from 12 bytes to the blob check) under every blob threshold around it."""
    rng = random.Random(11)
    words = ["alpha", "beta", "quarterly", "infrastructure", "x" * 15]
    for _ in range(300):
        pieces = []
        for _ in range(rng.randrange(20, 120)):
            if rng.random() < 0.15:
                raw = bytes(rng.randrange(0x20, 0x7F) if rng.random() < 0.8 else rng.randrange(256)
                            for _ in range(rng.randrange(6, 16)))
                pieces.append(_encoded(raw, rng.randrange(5), rng.random() < 0.5))
            else:
                pieces.append(rng.choice(words))
        text = " ".join(pieces)
        for min_blob_len in (None, 8, 11, 12, 13, 16, 17, 20, 32):
            assert_same(NATIVE.scan_query, PYTHON.scan_query, text, min_blob_len=min_blob_len,
                        max_tokens=None)


def _letter_token(rng: random.Random) -> str:
    """Letters only, 10..18 of them: words in every case shape, hex-letter runs and mixed case
    (which may decode as base64 text)."""
    size = rng.randrange(10, 19)
    shape = rng.randrange(7)
    if shape == 6:
        # Base64 of printable text that happens to be letters only: flagged from 12 characters.
        import base64

        out = ""
        while len(out) < size:
            group = base64.b64encode(bytes(rng.randrange(0x20, 0x7F) for _ in range(3))).decode()
            if group.isalpha():
                out += group
        return out[:size]
    if shape == 0:
        return "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(size))
    if shape == 1:
        return rng.choice("ABCDEFGHIJKLMNOPQRSTUVWXYZ") + "".join(
            rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(size - 1))
    if shape == 2:
        return "".join(rng.choice("ABCDEFGHIJKLMNOPQRSTUVWXYZ") for _ in range(size))
    if shape == 3:
        return "".join(rng.choice("abcdefABCDEF") for _ in range(size))
    if shape == 4:
        # One upper-case letter after the first: not word-shaped.
        word = [rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(size)]
        word[rng.randrange(1, size)] = rng.choice("ABCDEFGHIJKLMNOPQRSTUVWXYZ")
        return "".join(word)
    return "".join(rng.choice("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz") for _ in range(size))


def test_long_letter_tokens_agree() -> None:
    """Tokens of 10-18 letters (the block loop passes word-shaped ones under 16 bytes over without
    the blob scan), amid plain words, at the end of the text (fewer than 16 bytes readable) and
    next to non-ASCII text, under blob thresholds around their lengths."""
    rng = random.Random(17)
    plain = ["alpha", "beta", "quarterly", "figures", "and"]
    for case in range(400):
        tokens = [rng.choice(plain) if rng.random() < 0.6 else _letter_token(rng)
                  for _ in range(rng.randrange(1, 90))]
        if case % 3 == 0:
            tokens.append(_letter_token(rng))
        text = " ".join(tokens)
        if case % 5 == 0:
            text = "é " + text
        for min_blob_len in (None, 8, 12, 13, 16, 17, 32):
            assert_same(NATIVE.scan_query, PYTHON.scan_query, text, min_blob_len=min_blob_len,
                        max_tokens=None)
            assert_same(NATIVE.scan_query, PYTHON.scan_query, text.encode(), min_blob_len=min_blob_len,
                        max_tokens=None)


def test_token_lengths_around_the_block_loop_cut_agree() -> None:
    """Tokens of 1..20 bytes (letters, digits and punctuation) under every blob threshold from 8
    to 20: the native block loop checks a block for a token that leaves it (from min(min_blob_len,
    12) bytes) with bit runs, and skips the per-token test in blocks without one."""
    rng = random.Random(23)
    alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.,;:!?-+/"
    for case in range(60):
        tokens = ["".join(rng.choice(alphabet[: rng.choice((26, 52, 62, len(alphabet)))])
                          for _ in range(rng.randrange(1, 21))) for _ in range(rng.randrange(30, 200))]
        text = " ".join(tokens)
        for min_blob_len in (None, *range(8, 21)):
            assert_same(NATIVE.scan_query, PYTHON.scan_query, text, min_blob_len=min_blob_len,
                        max_tokens=None, max_ngram_run=0.0)


def test_model_estimate_of_letter_and_digit_blocks_agrees() -> None:
    """Blocks whose tokens are all letters and digits count the model-token estimate for the whole
    block (the bytes 0, 4, 8, 12 and 16 past each token start) instead of per token: tokens of
    every length around those steps, between whitespace runs of 1-3 bytes, with and without a long
    token (which leaves the block loop) in the block."""
    rng = random.Random(29)
    alnum = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
    for case in range(80):
        top = 16 if case % 2 else 24
        tokens = ["".join(rng.choice(alnum) for _ in range(rng.randrange(1, top + 1)))
                  for _ in range(rng.randrange(20, 300))]
        text = "".join(t + rng.choice((" ", " ", "\n", "  ", " \t ")) for t in tokens)
        for min_blob_len in (None, 8, 12, 17, 32):
            assert_same(NATIVE.scan_query, PYTHON.scan_query, text, min_blob_len=min_blob_len,
                        max_tokens=None, max_ngram_run=0.0)
        assert_same(NATIVE.scan_query, PYTHON.scan_query, text, max_model_tokens=len(text) // 5)


def test_repetition_details_agree() -> None:
    """The native repetition detail is written into one buffer (ratio digits and the repr of
    max_repetition): every ratio of up to 40 tokens, under caps with short and long reprs, alone
    and next to other whole-text violations."""
    caps = [0.0, 0.1, 0.25, 0.5, 1 / 3, 0.1 + 0.2, 1e-300, 5e-324, 0.999999999999]
    for total in range(1, 41):
        for unique in range(1, total + 1):
            words = [f"w{i}" for i in range(unique)] + ["w0"] * (total - unique)
            text = " ".join(words)
            for cap in caps:
                assert_same(NATIVE.scan_query, PYTHON.scan_query, text, max_repetition=cap)
            assert_same(NATIVE.scan_query, PYTHON.scan_query, text, max_repetition=0.0, max_tokens=3,
                        max_ngram_run=0.0)


def test_short_token_keys_agree() -> None:
    """The small token table matches a token of at most 16 bytes without a NUL byte by its 16
    zero-padded bytes kept in the slot, and any other token by its entry: tokens whose padded bytes
    are the same but that differ in a trailing NUL byte or in length must stay distinct, whichever
    path (block loop or byte-at-a-time, seen first or second) each one takes."""
    rng = random.Random(41)
    words = ["a", "a\x00", "a\x00\x00", "ab", "x" * 15, "x" * 15 + "\x00", "x" * 16, "x" * 16 + "\x00",
             "x" * 17, "x" * 8 + "\x00" * 8, "x" * 8, "\x00", "\x00a", "y" * 16, "y" * 16 + "y"]
    plain = "the quick brown fox jumps over a lazy dog " * 3  # block-loop text (printable ASCII)
    for case in range(60):
        pieces = []
        for _ in range(rng.randrange(1, 40)):
            pieces.append(rng.choice(words))
            if rng.random() < 0.2:
                pieces.append(plain)
            if rng.random() < 0.1:
                pieces.append("é")  # sends its block to the byte-at-a-time path
        text = " ".join(pieces)
        for min_blob_len in (None, 8):
            assert_same(NATIVE.scan_query, PYTHON.scan_query, text, max_tokens=None, max_ngram_run=0.0,
                        min_blob_len=min_blob_len)
        assert_same(NATIVE.scan_query, PYTHON.scan_query, text.encode(), max_tokens=None, max_ngram_run=0.0)
    # Over 64 KiB the binding scans without the GIL, with a table of the scan's own.
    text = " ".join(rng.choice(words) + " " + plain for _ in range(600))
    assert len(text) > 1 << 16
    assert_same(NATIVE.scan_query, PYTHON.scan_query, text, max_tokens=None, max_ngram_run=0.0)
    # Two different tokens meet only where the keyed hash puts them in one probe chain, so many
    # such pairs (about a hundred meetings over the loop, for any key) in tables of up to 510
    # distinct tokens, the most the small table holds: each word with one and two NUL bytes after
    # it (the same padded bytes, other lengths), and 8-16 byte words of one 8-byte prefix (block
    # loop tokens that differ only past their first 8 bytes).
    letters = "abcdefghijklmnopqrstuvwxyz"
    for case in range(120):
        stems = {"".join(rng.choice(letters) for _ in range(rng.randrange(1, 15))) for _ in range(170)}
        tokens = [w + tail for w in stems for tail in ("", "\x00", "\x00\x00")]
        rng.shuffle(tokens)
        assert_same(NATIVE.scan_query, PYTHON.scan_query, " ".join(tokens), max_tokens=None,
                    max_ngram_run=0.0)
        if case % 6 == 0:
            ids = [f"customer{rng.randrange(10 ** 8):0{rng.randrange(1, 9)}d}" for _ in range(500)]
            assert_same(NATIVE.scan_query, PYTHON.scan_query, " ".join(ids), max_tokens=None,
                        max_ngram_run=0.0)
