"""Detector forms left open by h-det3 and the '+' pass (docs/security-testing.md, "Detector forms 3"
and "A '+' before a number that is no phone number", their "Left"):

* NANP numbers with a trunk 1 before the area code in parentheses (``1 (234) 567-8901``), dots
  after the parentheses (``+1 (234) 567.8901``, ``(234) 567.8901``), a mixed NANP number ending
  with a space (``555-123 4567``, not after pages: ``259-264 1970``), a trunk 1 before a 3-2-4
  (``1-234-56-7890``);
* international numbers with the country code in parentheses before the trunk prefix
  (``(+44) (0)20 7946 0958``), with ``00`` for the ``+`` (``0049 30 1234567``), with dots glued
  to the ``+`` (``+44.20.7946.0958``), each with an assigned country code;
* an SSN whose area is in parentheses (``+(123)-45-6789``) or with a space among its dashes
  (``123 - 45 6789``);
* ``.`` between the groups of a card (``4111.1111.1111.1111``) or an IBAN.

Every case runs through the whole detector (plain, folded and decoded views) with the native kernel
and with the pure-Python twin (both must agree), through the public ``find_sensitive``/``redact``,
and once in a process with QDRANT_GUARD_IMPLEMENTATION=python.
"""
from __future__ import annotations

import pytest
from detectkit import assert_linear, embedded_query, python_process
from detectkit import found as _found
from detectkit import spans as _spans

from qdrant_guard.detect import find_sensitive, redact


# ------------------------------------------------------------------ NANP forms
@pytest.mark.parametrize(("text", "value"), [
    ("1 (234) 567-8901", "1 (234) 567-8901"),
    ("call 1 (800) 555-0199 now", "1 (800) 555-0199"),
    ("1-(234) 567-8901", "1-(234) 567-8901"),
    ("1(234)567-8901", "1(234)567-8901"),
    ("tel: 1 (234)-567-8901.", "1 (234)-567-8901"),
    ("(234)-567-8901", "(234)-567-8901"),
    ("(234) 567.8901", "(234) 567.8901"),
    ("1 (234) 567.8901", "1 (234) 567.8901"),
    ("x+1 (234) 567-8901", "1 (234) 567-8901"),  # "+" glued to a letter: the trunk 1 is taken
    ("555-123 4567", "555-123 4567"),
    ("call 555-123 4567 today", "555-123 4567"),
    ("tel 1 800-555 0199", "1 800-555 0199"),
    ("1-234-56-7890", "1-234-56-7890"),
    ("phone: 1-666-12-3456.", "1-666-12-3456"),  # a phone number: the SSA rules are an SSN's
])
def test_a_nanp_number_in_these_forms_is_found_whole(text, value):
    assert _found(text) == [(value, "PHONE")]
    assert redact(text) == text.replace(value, "[PHONE]")


# ------------------------------------------------------------------ international forms
@pytest.mark.parametrize(("text", "value"), [
    ("+1 (234) 567.8901", "+1 (234) 567.8901"),
    ("+44 (20) 7946.0958", "+44 (20) 7946.0958"),
    ("(+44) (0)20 7946 0958", "(+44) (0)20 7946 0958"),
    ("(+44)(0)20 7946 0958", "(+44)(0)20 7946 0958"),
    ("(+1) (234) 567-8901", "(+1) (234) 567-8901"),
    ("0049 30 1234567", "0049 30 1234567"),
    ("call 0044 20 7946 0958.", "0044 20 7946 0958"),
    ("0044 (0)20 7946 0958", "0044 (0)20 7946 0958"),
    ("001 234 567 8901", "001 234 567 8901"),
    ("00353 87 123 4567", "00353 87 123 4567"),
    ("0033 6 12 34 56 78", "0033 6 12 34 56 78"),
    ("0039 06 1234 5678", "0039 06 1234 5678"),  # Italy keeps its 0 after the country code
    ("0049-30-1234567", "0049-30-1234567"),
    ("+44.20.7946.0958", "+44.20.7946.0958"),
    ("+33.6.12.34.56.78", "+33.6.12.34.56.78"),
    ("call +1.415.555.1234 now", "+1.415.555.1234"),
    ("+49.30.1234567", "+49.30.1234567"),
    ("(+44)\u00a0(0)20\u00a07946\u00a00958", "(+44)\u00a0(0)20\u00a07946\u00a00958"),  # no-break spaces
])
def test_an_international_number_in_these_forms_is_found_whole(text, value):
    assert _found(text) == [(value, "PHONE")]
    assert redact(text) == text.replace(value, "[PHONE]")


# ------------------------------------------------------------------ SSNs
@pytest.mark.parametrize(("text", "value"), [
    ("+(123)-45-6789", "(123)-45-6789"),
    ("ssn (123)-45-6789", "(123)-45-6789"),
    ("ssn (123) 45-6789.", "(123) 45-6789"),
    ("(123)45-6789", "(123)45-6789"),
    ("123 - 45 6789", "123 - 45 6789"),
    ("ssn 123 45 - 6789", "123 45 - 6789"),
    ("ssn 123--45 6789", "123--45 6789"),
    ("my ssn: 123 \u2013 45 6789", "123 \u2013 45 6789"),  # an en dash, folded
])
def test_an_ssn_in_these_forms_is_found(text, value):
    assert _found(text) == [(value, "SSN")]
    assert redact(text) == text.replace(value, "[SSN]")


# ------------------------------------------------------------------ dots in cards and IBANs
@pytest.mark.parametrize(("text", "value", "type_"), [
    ("4111.1111.1111.1111", "4111.1111.1111.1111", "CREDIT_CARD"),
    ("card 5555.5555.5555.4444 exp 12/29", "5555.5555.5555.4444", "CREDIT_CARD"),
    ("amex 3782.822463.10005", "3782.822463.10005", "CREDIT_CARD"),
    ("4222.2222.2222.2", "4222.2222.2222.2", "CREDIT_CARD"),  # 13 digits, Luhn-valid
    ("GB82.WEST.1234.5698.7654.32", "GB82.WEST.1234.5698.7654.32", "IBAN"),
    ("iban: DE89.3704.0044.0532.0130.00.", "DE89.3704.0044.0532.0130.00", "IBAN"),
    ("gb82.west.1234.5698.7654.32", "gb82.west.1234.5698.7654.32", "IBAN"),
])
def test_a_dotted_card_or_iban_is_found(text, value, type_):
    assert _found(text) == [(value, type_)]
    assert redact(text) == text.replace(value, f"[{type_}]")


def test_lists_of_the_new_forms_find_every_value():
    text = ("UK (+44) (0)20 7946 0958, DE 0049 30 1234567; US 1 (234) 567-8901 or 555-123 4567; "
            "card 4111.1111.1111.1111, ssn 123 - 45 6789")
    assert _found(text) == [("(+44) (0)20 7946 0958", "PHONE"), ("0049 30 1234567", "PHONE"),
                            ("1 (234) 567-8901", "PHONE"), ("555-123 4567", "PHONE"),
                            ("4111.1111.1111.1111", "CREDIT_CARD"), ("123 - 45 6789", "SSN")]


# ------------------------------------------------------------------ not findings
@pytest.mark.parametrize("text", [
    # versions, IPs, dates, decimals, prices
    "1.2.3.4", "version 4.11.1111.1111", "192.168.100.200", "10.0.19041.1", "2023-10-15", "2023.10.15",
    "price 4111.11", "+3.14159265", "+123.45", "total 1.234.567,89 EUR", "+1.234.567.890",
    # the validators are kept
    "4111.1111.1111.1112", "1234.5678.9012.3452",  # Luhn fails; Luhn-valid with no known IIN
    "GB82.WEST.1234.5698.7654.33",  # mod-97 fails
    "GB82.WEST.1234.5698.7654.32.example", "GB82.WEST 1234.5698 7654.32",  # runs on; mixed with spaces
    "ssn (666)-12-3456", "ssn (123)-00-6789", "(900) 45-6789", "ssn 666 - 12 3456", "123 - 45 0000",
    # a signed number, an unassigned country code, a version or an IPv4 address after a "+"
    "+12.34.56.78.90", "+49.123.456.789", "+49.123.456.789.012", "+20.15.30.45", "+212.58.244.20",
    "+1.22.33.44.55", "+1.22.33.44.555", "+44.2222.33", "+44.20.7946.0", "+1.2.3", "+1.22.333",
    # "00" numbers that are no phone numbers: unassigned codes, zero padding, a table's digit groups
    "0012 3456 7890", "0010 2030 4050 6070", "id 00000 1234 5678", "0049 0301234567",
    "deuteron-proton mass ratio  1.999 007 501 2699", "ratio 1.999 007 501 269 935", "0049 30", "0049 30 12",
    "0044 822463",
    "001 45 666-822463",  # NANP's 10 digits after the code 1
    "011 49 30 12",  # 011 for the "+" is read since h-det5 (forms5); too few digits here
    "+1 (234) 5.8901", "+1 (2) 34.56",  # dotted after the parentheses: a group of 1; 6 digits in all
    # "." mixed with other separators
    "4111.1111 1111.1111", "123-45.6789", "ssn 123.45 6789",
    # pages and a year after a NANP-shaped range; ranges and sums
    "Math. Monthly 77, 259-264 1970.", "pp. 259-264 2019", "tel 1 800-555 1999", "555-123 1999",
    "1 - 2 - 3 4", "2019 - 123 - 45 6789", "123 - 45 6789 - 1", "123 - 45 6789 1024",
    # a trunk 1 after more digits, or before something that is no NANP number
    "21 (034) 567-8901", "2-234-56-7890", "5.123-45-6789", "11-234-56-7890", "1-034-56-7890", "5.1-234-56-7890",
    "1-234-56-78901",
    # the date rule of h-det3 after a country code
    "+1 2023-10-15", "+49 2012-10-15", "(+1) 2023-10-15",
])
def test_versions_ips_dates_decimals_and_near_misses_are_not_findings(text):
    assert _spans(text) == []
    assert find_sensitive(text) == []
    assert redact(text) == text


@pytest.mark.parametrize(("text", "want"), [
    # "1.2 " before: the 1 is part of a dotted number, not a trunk prefix
    ("v1.1 (234) 567-8901", [("(234) 567-8901", "PHONE")]),
    # "+0" is no country code: the NANP part, as before
    ("+0 (234) 567-8901", [("(234) 567-8901", "PHONE")]),
    ("+1 (234) 567-8901", [("+1 (234) 567-8901", "PHONE")]),
    # a phone number and an SSN side by side
    ("0049 30 1234567 and 123 - 45 6789", [("0049 30 1234567", "PHONE"), ("123 - 45 6789", "SSN")]),
])
def test_the_rules_edges(text, want):
    assert _found(text) == want


# ------------------------------------------------------------------ QDRANT_GUARD_IMPLEMENTATION=python
def test_the_python_implementation_finds_the_same_forms():
    texts = ["1 (234) 567-8901", "(+44) (0)20 7946 0958", "0049 30 1234567", "+44.20.7946.0958",
             "ssn +(123)-45-6789", "ssn 123 - 45 6789", "555-123 4567", "1-234-56-7890",
             "4111.1111.1111.1111", "GB82.WEST.1234.5698.7654.32", "+49 2012-10-15 1.2.3.4"]
    assert python_process(texts) == ["[PHONE]", "[PHONE]", "[PHONE]", "[PHONE]", "ssn +[SSN]", "ssn [SSN]",
                                     "[PHONE]", "[PHONE]", "[CREDIT_CARD]", "[IBAN]", "+49 2012-10-15 1.2.3.4"]


# ------------------------------------------------------------------ through the guarded client
@pytest.mark.parametrize(("value", "placeholder"), [
    ("0049 30 1234567", "[PHONE]"), ("4111.1111.1111.1111", "[CREDIT_CARD]"), ("123 - 45 6789", "[SSN]"),
])
def test_a_query_with_such_a_value_reaches_the_embedder_redacted(tmp_path, value, placeholder):
    assert embedded_query(tmp_path, f"claims of ssn {value} please") == [f"claims of ssn {placeholder} please"]


# ------------------------------------------------------------------ cost
@pytest.mark.parametrize("unit", [
    "0049 30 1234567 ", "(+44) (0)20 7946 0958 ", "+44.20.7946.0958 ", "1 (234) 567.8901 ", "123 - 45 6789 ",
    "4111.1111.1111.1111 ", "GB82.WEST.1234.5698.7654.32 ", "(123)-45-6789 ", "555-123 4567 ",
    # near misses that make each new reading start and give up
    "0049 ", "001 (0", "(+1)(2", "1 (2", "1 - 1 1 ", "+1.1", "00", "1-(234)-", "GB82.", "+(1",
])
def test_long_repetitions_of_the_new_forms_stay_linear(unit):
    assert_linear(unit)  # as tests/test_detect_pairs.py's complexity check
    _spans(unit * 300)
