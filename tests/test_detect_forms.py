"""Two misses of the detector the twenty-third review left documented (docs/security-testing.md,
"Detector forms: enclosed digits and mixed separators"): digits in enclosed forms (circled,
parenthesised, with a full stop, dingbat) and SSNs and cards whose groups mix spaces and hyphens.

Every case runs through the public ``find_sensitive``/``redact`` (the native kernel under
QDRANT_GUARD_REQUIRE_NATIVE=1), through the same views with the pure-Python twin as kernel (and
both must agree), and once in a process with QDRANT_GUARD_IMPLEMENTATION=python.
"""
from __future__ import annotations

import pytest
from detectkit import embedded_query, python_process
from detectkit import spans as _spans

from qdrant_guard.detect import find_sensitive, redact


def _redacted(text: str, spans: list[tuple[int, int, str, str]]) -> str:
    out, pos = [], 0
    for s, e, t, _ in spans:
        out += [text[pos:s], f"[{t}]"]
        pos = e
    return "".join(out) + text[pos:]


def _assert_found(text: str, value: str, type_: str) -> None:
    """``value`` (a substring of ``text``) is the one finding, of ``type_``, and redacts whole."""
    want = text.replace(value, f"[{type_}]")
    got = _spans(text)
    assert [(text[s:e], t) for s, e, t, _ in got] == [(value, type_)]
    assert _redacted(text, got) == want
    assert [(text[f.start:f.end], f.type) for f in find_sensitive(text)] == [(value, type_)]
    assert redact(text) == want


def _enclose(text: str, zero: str, one: str) -> str:
    """``text`` with each ASCII digit written in an enclosed form: ``zero`` for 0 (or "" when the
    form has none: 0 is left ASCII), ``one`` the form's 1 (its 2..9 follow it)."""
    return "".join((zero or c) if c == "0" else chr(ord(one) + int(c) - 1) if c.isdigit() else c
                   for c in text)


# (zero, one) of each single-digit form: circled, parenthesised, full stop, double circled,
# dingbat negative circled, dingbat circled sans-serif, dingbat negative circled sans-serif.
FORMS = [("\u24ea", "\u2460"), ("", "\u2474"), ("", "\u2488"), ("", "\u24f5"), ("\u24ff", "\u2776"),
         ("", "\u2780"), ("", "\u278a")]
FORM_IDS = ["circled", "parenthesised", "full-stop", "double-circled", "negative-circled",
            "dingbat-sans", "dingbat-negative-sans"]


# ------------------------------------------------------------------ enclosed digit forms
@pytest.mark.parametrize(("zero", "one"), FORMS, ids=FORM_IDS)
def test_an_ssn_in_enclosed_digits_is_found(zero, one):
    # NFKC reads these as the digit (with parentheses or a stop for some); the folded view did
    # not know them, so "ssn ①②③-④⑤-⑥⑦⑧⑨" was found by nothing.
    ssn = _enclose("123-45-6789", zero, one)
    _assert_found(f"my ssn is {ssn} thanks", ssn, "SSN")


@pytest.mark.parametrize(("zero", "one"), FORMS, ids=FORM_IDS)
def test_a_card_in_enclosed_digits_is_found(zero, one):
    card = _enclose("5500 0000 0000 0004", zero, one)
    _assert_found(f"card {card} on file", card, "CREDIT_CARD")


def test_enclosed_zeros_and_the_digit_comma_forms_outside_the_bmp_are_found():
    # U+24EA CIRCLED DIGIT ZERO, U+24FF NEGATIVE CIRCLED DIGIT ZERO, U+1F101..U+1F10A DIGIT n COMMA.
    card = "\u2464\u2464\u24ea\u24ff " + "\u24ea" * 4 + " " + "\u24ff" * 4 + " \u24ea\u24ea\u24ea\u2463"
    _assert_found(f"card {card}", card, "CREDIT_CARD")
    comma = "".join(chr(0x1F101 + int(c)) if c.isdigit() else c for c in "123-45-6789")
    _assert_found(f"ssn {comma}", comma, "SSN")


def test_two_digit_enclosed_numbers_fold_to_their_two_digits():
    # ⑫ is "12" to a reader; the view keeps a span's offsets in the original text.
    ssn = "\u246b\u2462-\u2463\u2464-\u2465\u2466\u2467\u2468"  # ⑫③-④⑤-⑥⑦⑧⑨
    _assert_found(f"ssn {ssn} ok", ssn, "SSN")
    card = "\u2463\u246a\u2460 \u246a\u246a \u246a\u246a \u246a\u246a"  # ④⑪① ⑪⑪ ⑪⑪ ⑪⑪
    _assert_found(f"card {card}.", card, "CREDIT_CARD")
    # Parenthesised, full-stop, negative and CJK circled two-digit forms (⑽, ⒓, ⓬, ㉑ ... ㊿).
    ssn = "\u2484\u2462-\u2493-\u2465\u2466\u24f2"  # ⒄③-⒓-⑥⑦⓲ = 173-12-6718
    _assert_found(f"ssn {ssn}", ssn, "SSN")


def test_enclosed_digits_with_invisible_characters_map_back_whole():
    ssn = "\u246b\u200b\u2462-\u2463\u2464-\u2465\u2466\u00ad\u2467\u2468"
    _assert_found(f"ssn \u200b{ssn}.", ssn, "SSN")


@pytest.mark.parametrize("text", [
    "steps \u2460 mix \u2461 bake \u2462 serve",  # a numbered list
    "\u2474 first \u2475 second \u2476 third",
    "chapters \u2488 intro \u2489 method \u248a results",
    "items \u2469 \u246a \u246b \u246c \u2473 and \u3251 \u32bf",  # ⑩ ⑪ ⑫ ⑬ ⑳ ㉑ ㊿
    "\u2460\u2461\u2462\u2463\u2464\u2465\u2466\u2467\u2468",  # bare 9 digits, no "ssn" before them
    "rank \u2776 \u2777 \u2778, \u2780\u2781\u2782, \u24f5\u24f6",
])
def test_enclosed_digits_in_ordinary_text_are_not_findings(text):
    assert _spans(text) == []
    assert find_sensitive(text) == []
    assert redact(text) == text


# ------------------------------------------------------------------ mixed separators
@pytest.mark.parametrize(("text", "value", "type_"), [
    ("ssn 123-45 6789", "123-45 6789", "SSN"),
    ("ssn 123 45-6789", "123 45-6789", "SSN"),
    ("my number is 123-45 6789.", "123-45 6789", "SSN"),  # as "123-45-6789": no context needed
    ("card 4111-1111 1111-1111", "4111-1111 1111-1111", "CREDIT_CARD"),
    ("card 4111 1111 1111-1111 exp 12/29", "4111 1111 1111-1111", "CREDIT_CARD"),
    ("card 4111-1111-1111 1111", "4111-1111-1111 1111", "CREDIT_CARD"),
    ("amex 3782 822463-10005", "3782 822463-10005", "CREDIT_CARD"),
    ("mc 5555-5555 5555-4444, thanks", "5555-5555 5555-4444", "CREDIT_CARD"),
    ("card 4111-1111 1111-1111 12/29", "4111-1111 1111-1111", "CREDIT_CARD"),  # expiry after it
    ("ssn 123\u201045 6789", "123\u201045 6789", "SSN"),  # a Unicode hyphen and a space
    ("ssn 123-45\u00a06789", "123-45\u00a06789", "SSN"),  # a no-break space
    ("ssn\uff1a\uff11\uff12\uff13-\uff14\uff15 \uff16\uff17\uff18\uff19", "\uff11\uff12\uff13-\uff14\uff15 \uff16\uff17\uff18\uff19", "SSN"),
    ("ssn \u2460\u2461\u2462 \u2463\u2464-\u2465\u2466\u2467\u2468", "\u2460\u2461\u2462 \u2463\u2464-\u2465\u2466\u2467\u2468", "SSN"),
    ("ssn 123%2D45 6789", "123%2D45 6789", "SSN"),  # an escaped hyphen beside a space
])
def test_an_ssn_or_card_with_mixed_separators_is_found(text, value, type_):
    # The chain read one consistent separator: "123-45 6789" was a 3-2 run then a 4-digit number.
    got = _spans(text)
    assert [(text[s:e], t) for s, e, t, _ in got] == [(value, type_)]
    assert redact(text) == text.replace(value, f"[{type_}]")


def test_lists_with_mixed_separators_find_every_value():
    text = "ssn 123-45 6789 234 56-7890 and card 4111 1111-1111 1111"
    got = _spans(text)
    assert [(text[s:e], t) for s, e, t, _ in got] == [
        ("123-45 6789", "SSN"), ("234 56-7890", "SSN"), ("4111 1111-1111 1111", "CREDIT_CARD")]
    assert redact(text) == "ssn [SSN] [SSN] and card [CREDIT_CARD]"


def test_a_mixed_card_prefix_does_not_cut_a_later_ssn():
    # 4000-1005 1111 123 is a Luhn-valid 15-digit card shape: taking it would leave "45 6789" of
    # the SSN after it in the clear (the list rule's veto, kept for mixed separators); the card's
    # digits the SSN leaves are a card stretch of their own (tests/test_glued_card.py).
    text = "4000-1005 1111 123 45 6789"
    assert [(text[s:e], t) for s, e, t, _ in _spans(text)] == [("4000-1005 1111", "CREDIT_CARD"), ("123 45 6789", "SSN")]
    assert redact(text) == "[CREDIT_CARD] [SSN]"


@pytest.mark.parametrize("text", [
    # phone numbers in no format the detector reads (none is an SSN or card; NANP numbers with
    # a hyphen before the last group, and E.164 ones, are phones since h-det2 whatever their
    # separators: tests/test_detect_forms2.py)
    # ("call 555-123 4567" is a NANP number since h-det4: tests/test_detect_forms4.py)
    "tel 020 7946-0958", "06-12 34 56 78",
    # dates and times
    "2024-01 15", "on 2024-01-15 10 30", "12-05 2026", "dates 2023-12 2024-01 2024-02", "10 12-30 2024",
    # version strings
    "version 1.2.3 4-5", "v10.15 7-1 build 2024-11 3", "release 3.12-1 2 3",
    # ordinary numbers in text
    "sizes 123-45 6789 1024",  # an SSN shape inside a list, no "ssn" before it
    "scores 12 34-56 7890", "rows 100-200 300-400 500", "pages 123-45 and 6789",
    # the validators and false-positive rules are kept
    "card 4111-1111 1111-1112",  # Luhn fails
    "card 1234-5678 9012 3452", "card 9111 1111-1111 1110",  # Luhn-valid, no known IIN
    "card 4111-1111 1111-111",  # 15 digits, Luhn fails
    "ssn 000-12 3456", "ssn 666 12-3456", "ssn 923-45 6789", "ssn 123-00 6789", "ssn 123 45-0000",
    "ssn 078-05 1120",  # the advertising number
    "ssn 123-45 67890", "ssn 12-345 6789", "ssn 123-45 6789-1", "ssn a123-45 6789", "ssn 123-45 6789x",
    # ("ssn 123--45 6789" and "ssn 123 - 45 6789", a space among dashes, are SSNs since h-det4)
    "ssn 123-45.6789",  # "." is no separator of an SSN
    "id 1.123-45 6789",  # glued to a number before it
])
def test_mixed_separators_do_not_make_phones_dates_versions_or_lists_findings(text):
    assert _spans(text) == []
    assert find_sensitive(text) == []
    assert redact(text) == text


# ------------------------------------------------------------------ QDRANT_GUARD_IMPLEMENTATION=python
def test_the_python_implementation_finds_the_same_forms():
    texts = ["ssn \u2460\u2461\u2462-\u2463\u2464-\u2465\u2466\u2467\u2468", "ssn 123-45 6789",
             "card 4111-1111 1111-1111", "ssn \u246b\u2462-45-6789", "call 555-123 4567"]
    assert python_process(texts) == ["ssn [SSN]", "ssn [SSN]", "card [CREDIT_CARD]", "ssn [SSN]",
                                   "call [PHONE]"]


# ------------------------------------------------------------------ through the guarded client
@pytest.mark.parametrize("value", [
    "123-45 6789", "\u2460\u2461\u2462-\u2463\u2464-\u2465\u2466\u2467\u2468", "\u246b\u2462 45-6789",
])
def test_a_query_with_such_an_ssn_reaches_the_embedder_redacted(tmp_path, value):
    assert embedded_query(tmp_path, f"claims of ssn {value} please") == ["claims of ssn [SSN] please"]
