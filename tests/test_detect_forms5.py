"""Detector forms left open by h-det4 (docs/security-testing.md, "Detector forms 4", its "Left"):

* ``011`` for the ``+`` (the North American exit code: ``011 44 20 7946 0958``) and ``00`` apart
  from the country code (``00 44 20 7946 0958``);
* ``.`` mixed with other separators in a phone number after a country code (``+1 415.555-0123``,
  ``+44 20.7946 0958``, which was found only up to ``7946``);
* an SSN with spaced doubled dashes (``123 -- 45 -- 6789``);
* a ``+`` glued to a phone word (``tel+44 20 7946 0958``).

Not read, and pinned below as no finding: compact ``00`` numbers (``00442079460958``: a zero-padded
identifier has the same digits), ``011`` glued to the country code (``01144``, a ZIP code of
Massachusetts), a NANP number whose space-separated last group is a year (``555-123 1999``, as
h-det4 decided: citations), a dotted ``+`` number whose groups after the code are all of 3 digits
(``+7.495.123.456``: a signed number with thousands separators; with 10 digits no Russian number
either), ``.`` mixed into an SSN or a card (``123-45.6789``, ``4111.1111 1111.1111``), and a NANP
number with a dot and a hyphen but no country code (``415.555-0123``): license texts cite DFARS
clauses so, ``252.227-7013`` (34 of 7.0 M lines with a digit under /usr/share/doc, the Python
library and the venv, all such citations, when it was read).

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


# ------------------------------------------------------------------ exit codes
@pytest.mark.parametrize(("text", "value"), [
    ("011 44 20 7946 0958", "011 44 20 7946 0958"),
    ("call 011 49 30 1234567 from the US", "011 49 30 1234567"),
    ("011-44-20-7946-0958", "011-44-20-7946-0958"),
    ("dial 011 33 6 12 34 56 78.", "011 33 6 12 34 56 78"),
    ("011 39 06 1234 5678", "011 39 06 1234 5678"),  # Italy keeps its 0
    ("011 44 (0)20 7946 0958", "011 44 (0)20 7946 0958"),
    ("011 1 415 555 0123", "011 1 415 555 0123"),  # was found without its "011 "
    ("011 353 87 123 4567", "011 353 87 123 4567"),
    ("00 44 20 7946 0958", "00 44 20 7946 0958"),
    ("00-49-30-1234567", "00-49-30-1234567"),
    ("00 33 6 12 34 56 78", "00 33 6 12 34 56 78"),
    ("00 1 234 567 8901", "00 1 234 567 8901"),
    ("tel. 00 44 (0)20 7946 0958", "00 44 (0)20 7946 0958"),
])
def test_an_exit_code_apart_from_the_country_code_is_read(text, value):
    assert _found(text) == [(value, "PHONE")]
    assert redact(text) == text.replace(value, "[PHONE]")


# ------------------------------------------------------------------ "." mixed with other separators
@pytest.mark.parametrize(("text", "value"), [
    ("+1 415.555-0123", "+1 415.555-0123"),
    ("+1 415-555.0123", "+1 415-555.0123"),
    ("call +1 415.555 0123 now", "+1 415.555 0123"),
    ("+44 20.7946 0958", "+44 20.7946 0958"),  # was found as "+44 20.7946", 0958 in the clear
    ("+44 20 7946.0958", "+44 20 7946.0958"),
    ("+7 495.123-45-67", "+7 495.123-45-67"),
    ("(+44) 20.7946 0958", "(+44) 20.7946 0958"),
    ("+33 6.12 34 56 78", "+33 6.12 34 56 78"),
    ("(phone: +1 212.555-0199)", "+1 212.555-0199"),
])
def test_a_phone_number_with_a_dot_among_its_separators_is_found_whole(text, value):
    assert _found(text) == [(value, "PHONE")]
    assert redact(text) == text.replace(value, "[PHONE]")


# ------------------------------------------------------------------ SSNs with " -- "
@pytest.mark.parametrize(("text", "value"), [
    ("123 -- 45 -- 6789", "123 -- 45 -- 6789"),
    ("ssn: 123 -- 45 -- 6789.", "123 -- 45 -- 6789"),
    ("123 -- 45-6789", "123 -- 45-6789"),
    ("123 -- 45 6789", "123 -- 45 6789"),  # a single space among " -- " (as among " - ")
    ("123--45 -- 6789", "123--45 -- 6789"),
    ("ssn 123 \u2014\u2014 45 \u2014\u2014 6789", "123 \u2014\u2014 45 \u2014\u2014 6789"),  # em dashes, folded
])
def test_an_ssn_with_spaced_doubled_dashes_is_found(text, value):
    assert _found(text) == [(value, "SSN")]
    assert redact(text) == text.replace(value, "[SSN]")


def test_a_card_with_spaced_doubled_dashes_is_found():
    assert _found("card 4111 -- 1111 -- 1111 -- 1111") == [("4111 -- 1111 -- 1111 -- 1111", "CREDIT_CARD")]


# ------------------------------------------------------------------ "+" glued to a phone word
@pytest.mark.parametrize(("text", "value"), [
    ("tel+44 20 7946 0958", "+44 20 7946 0958"),
    ("TEL+44 20 7946 0958", "+44 20 7946 0958"),
    ("Phone+1 (234) 567-8901", "+1 (234) 567-8901"),
    ("mobile+33 6 12 34 56 78", "+33 6 12 34 56 78"),
    ("fax+49.30.1234567", "+49.30.1234567"),
    ("cell+1 415.555-0123", "+1 415.555-0123"),
    ("tel(+44) 20 7946 0958", "(+44) 20 7946 0958"),
    ("tel+1 234-56-7890", "+1 234-56-7890"),  # a phone number after a phone word, not an SSN
    ("tel+14155550123", "+14155550123"),
    ("my_tel+44 20 7946 0958", "+44 20 7946 0958"),  # "_" is no letter or digit
])
def test_a_plus_glued_to_a_phone_word_starts_a_phone_number(text, value):
    assert _found(text) == [(value, "PHONE")]
    assert redact(text) == text.replace(value, "[PHONE]")


def test_lists_of_the_new_forms_find_every_value():
    text = ("UK 011 44 20 7946 0958, FR 00 33 6 12 34 56 78; US +1 415.555-0123 or +1 212-555.0199, "
            "tel+49 30 1234567; ssn 123 -- 45 -- 6789")
    assert _found(text) == [("011 44 20 7946 0958", "PHONE"), ("00 33 6 12 34 56 78", "PHONE"),
                            ("+1 415.555-0123", "PHONE"), ("+1 212-555.0199", "PHONE"),
                            ("+49 30 1234567", "PHONE"), ("123 -- 45 -- 6789", "SSN")]


# ------------------------------------------------------------------ not findings
@pytest.mark.parametrize("text", [
    # exit codes: hex bytes, binary, unassigned codes, too short, a table, a zero after the code
    "00 44 20 79 46 09 58", "00 44 20 79 46 09 58 12 34", "hexdump: 00 33 61 23 45 67 89 ab",
    "011 1 101 110 0111", "011 1 123 456 7890", "00 1 034 567 8901",
    "00 12 3456 7890", "011 12 3456 7890", "00 44 822463", "011 44 20", "011 49 30 12",
    "1 011 44 20 7946 0958", "12:00 44 20 7946 0958", "0x011 44 20 7946 0958", "00 44 0 7946 0958",
    # compact exit codes: zero-padded identifiers
    "00442079460958", "00493012345678", "id 0014155550123", "01144 20 7946 0958", "01144",
    # dots mixed in after a country code: decimals, prices, ranges, versions, IPs, thousands
    "+1 12.50-13.75", "+1 12.50 13.75 14.25", "+1 1.5-2.5", "+1 10.0.19041.1-beta", "+2 3.11.4-1",
    "+1 192.168.10-20", "+1 100.000-200", "+1 123.456 789", "+1 123.456-789.012", "+12.50 13.75-1",
    "+1 1234.5-67", "+1 192.168.10-20.5", "+1 12.34-56",  # 7 digits with the code's
    # a NANP number with a dot and a hyphen but no country code: a DFARS clause has its shape
    "in Clause 252.227-7013 (c) (1) of DFARs", "252.227-7014 and 202.227-7015", "415.555-0123",
    "415-555.0123", "+1 415.555-0123.5", "+1 415.555-0123-1",
    # h-det4's pins kept: "." mixed into an SSN or a card, a year after a NANP-shaped range
    "123-45.6789", "ssn 123.45 6789", "4111.1111 1111.1111", "555-123 1999", "tel 1 800-555 1999",
    # dotted "+" numbers read as signed numbers
    "+7.495.123.456", "+1.234.567.890",
    # spaced doubled dashes: the SSA rules, sums, runs on, dates, markup
    "123 -- 45 -- 0000", "666 -- 12 -- 3456", "ssn 900 -- 45 -- 6789", "2019 -- 123 -- 45 -- 6789",
    "123 -- 45 -- 6789 -- 1", "123 -- 45 -- 67890", "2023 -- 10 -- 15", "| 123 | -- | 45 |",
    "run --45 -- 6789", "123 --- 45 --- 6789", "card 4111 -- 1111 -- 1111 -- 1112",
    # a "+" glued to other words, or to a phone word glued to more
    "telx+44 20 7946 0958", "hotel+44 20 7946 0958", "1tel+44 20 7946 0958",
    "tele+44 20 7946 0958", "telephone+44 20 7946 0958", "abc+44 20 7946 0958",
])
def test_near_misses_are_not_findings(text):
    assert _spans(text) == []
    assert find_sensitive(text) == []
    assert redact(text) == text


@pytest.mark.parametrize(("text", "want"), [
    # a "+" glued to another word: the number is read as if it were not there (h-det2's pin)
    ("x+1 234-56-7890", [("234-56-7890", "SSN")]),
    ("x+1 415.555-0123", []),  # no country code, so no mixed reading: the bare form is not read
    # a list after a mixed number: the longest number that cuts no later finding
    ("+44 20.7946 0958 1 2", [("+44 20.7946 0958", "PHONE")]),
    # two dots: the dotted reading of h-det3 (its groups after the code), not the mixed one
    ("+44 20.7946.0958 1", [("+44 20.7946.0958", "PHONE")]),
    # a longer mixed reading would cut the SSN after it: the dotted part alone, and the SSN
    ("+44 20.7946 123 45 6789", [("+44 20.7946", "PHONE"), ("123 45 6789", "SSN")]),
    # an exit code apart, then an SSN-shaped rest: the phone number is one value
    ("011 44 234-56-7890", [("011 44 234-56-7890", "PHONE")]),
    # more groups than a number holds: its longest leading groups (as "0044 ..." and "+44 ..." read)
    ("011 44 20 7946 0958 1234", [("011 44 20 7946 0958", "PHONE")]),
    ("+1 20.7946 0958 12 34 56 78 90", [("+1 20.7946 0958 12 34", "PHONE")]),
    ("a 123 -- 45 -- 6789 and 011 44 20 7946 0958",
     [("123 -- 45 -- 6789", "SSN"), ("011 44 20 7946 0958", "PHONE")]),
])
def test_the_rules_edges(text, want):
    assert _found(text) == want


# ------------------------------------------------------------------ QDRANT_GUARD_IMPLEMENTATION=python
def test_the_python_implementation_finds_the_same_forms():
    texts = ["011 44 20 7946 0958", "00 44 20 7946 0958", "+1 415.555-0123", "+44 20.7946 0958",
             "ssn 123 -- 45 -- 6789", "tel+44 20 7946 0958", "00 44 20 79 46 09 58 +1 12.50-13.75"]
    assert python_process(texts) == ["[PHONE]", "[PHONE]", "[PHONE]", "[PHONE]", "ssn [SSN]", "tel[PHONE]",
                                     "00 44 20 79 46 09 58 +1 12.50-13.75"]


# ------------------------------------------------------------------ through the guarded client
@pytest.mark.parametrize(("value", "placeholder"), [
    ("011 44 20 7946 0958", "[PHONE]"), ("+1 415.555-0123", "[PHONE]"), ("123 -- 45 -- 6789", "[SSN]"),
])
def test_a_query_with_such_a_value_reaches_the_embedder_redacted(tmp_path, value, placeholder):
    assert embedded_query(tmp_path, f"claims of {value} please") == [f"claims of {placeholder} please"]


# ------------------------------------------------------------------ cost
@pytest.mark.parametrize("unit", [
    "011 44 20 7946 0958 ", "00 44 20 7946 0958 ", "+1 415.555-0123 ", "123 -- 45 -- 6789 ",
    "tel+44 20 7946 0958 ", "+44 20.7946 0958 ",
    # near misses that make each new reading start and give up
    "011 ", "00 4", "011 1 1", "+1 1.1-", "+1 12.50-", "4.5-6 ", "1 -- 2 ", "tel+", "tel+1 ", "00 44 20 ",
])
def test_long_repetitions_of_the_new_forms_stay_linear(unit):
    assert_linear(unit)  # as tests/test_detect_pairs.py's complexity check
    _spans(unit * 300)
