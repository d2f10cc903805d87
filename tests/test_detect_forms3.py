"""Detector forms left open by h-det2 (docs/security-testing.md, its entry's "Left"): international
phone numbers with parentheses (``+44 (0)20 7946 0958``, ``+1 (234) 567-8901``) or dots after the
country code (``+1 234.567.8901``), and SSNs and cards with doubled or mixed spaced dashes
(``123--45--6789``, ``123 - 45-6789``); and a false positive of h-det2's mixed E.164 reading, a
count or an offset before an ISO date (``+1 2023-10-15``).

Every case runs through the whole detector (plain, folded and decoded views) with the native kernel
and with the pure-Python twin (both must agree), through the public ``find_sensitive``/``redact``,
and once in a process with QDRANT_GUARD_IMPLEMENTATION=python.
"""
from __future__ import annotations

import pytest
from detectkit import embedded_query, python_process
from detectkit import found as _found
from detectkit import spans as _spans

from qdrant_guard.detect import find_sensitive, redact


# ------------------------------------------------------------------ parentheses after a country code
@pytest.mark.parametrize(("text", "value"), [
    ("+44 (0)20 7946 0958", "+44 (0)20 7946 0958"),
    ("call +44 (0) 20 7946 0958 today", "+44 (0) 20 7946 0958"),
    ("tel:+44(0)20 7946 0958.", "+44(0)20 7946 0958"),
    ("+49 (0)30 1234567", "+49 (0)30 1234567"),
    ("+41 (0)44 668 18 00", "+41 (0)44 668 18 00"),
    ("+61 (0)2 1234 5678", "+61 (0)2 1234 5678"),
    ("+33 (0)6 12 34 56 78", "+33 (0)6 12 34 56 78"),
    ("+353 (0)87 123 4567", "+353 (0)87 123 4567"),
    ("+44 (0)7911 123456", "+44 (0)7911 123456"),
    ("+1 (234) 567-8901", "+1 (234) 567-8901"),
    ("phone: +1 (234) 567 8901 ext 12", "+1 (234) 567 8901"),
    ("+1(234)567-8901", "+1(234)567-8901"),
    ("+1 (234)-567-8901", "+1 (234)-567-8901"),
    ("+7 (495) 123-45-67", "+7 (495) 123-45-67"),
    ("+49 (30) 1234567", "+49 (30) 1234567"),
    ("+44\u00a0(0)20\u00a07946\u00a00958", "+44\u00a0(0)20\u00a07946\u00a00958"),  # no-break spaces, folded
    ("+1 (234) 567\u20138901", "+1 (234) 567\u20138901"),  # an en dash, folded to "-"
])
def test_an_international_phone_with_parentheses_is_found_whole(text, value):
    assert _found(text) == [(value, "PHONE")]
    assert redact(text) == text.replace(value, "[PHONE]")


# ------------------------------------------------------------------ dots after a country code
@pytest.mark.parametrize(("text", "value"), [
    ("+1 234.567.8901", "+1 234.567.8901"),
    ("call +1 800.555.0199 now", "+1 800.555.0199"),
    ("(+1) 234.567.8901", "(+1) 234.567.8901"),
    ("+33 6.12.34.56.78", "+33 6.12.34.56.78"),
    ("+44 20.7946.0958", "+44 20.7946.0958"),
    ("+1 666.12.3456", "+1 666.12.3456"),  # a phone number: the SSA rules are an SSN's
])
def test_a_dotted_phone_after_a_country_code_is_found_whole(text, value):
    assert _found(text) == [(value, "PHONE")]


def test_lists_of_such_phones_find_every_value():
    text = "UK +44 (0)20 7946 0958, US +1 (234) 567-8901 and +1 345.678.9012; FR +33 6.12.34.56.78"
    assert _found(text) == [("+44 (0)20 7946 0958", "PHONE"), ("+1 (234) 567-8901", "PHONE"),
                            ("+1 345.678.9012", "PHONE"), ("+33 6.12.34.56.78", "PHONE")]
    assert _found("+1 (234) 567-8901, +1 (345) 678-9012") == [("+1 (234) 567-8901", "PHONE"),
                                                              ("+1 (345) 678-9012", "PHONE")]


# ------------------------------------------------------------------ doubled and mixed dashes
@pytest.mark.parametrize(("text", "value", "type_"), [
    ("123--45--6789", "123--45--6789", "SSN"),
    ("ssn: 123--45--6789.", "123--45--6789", "SSN"),
    ("123 - 45-6789", "123 - 45-6789", "SSN"),
    ("my ssn is 123-45 - 6789", "123-45 - 6789", "SSN"),
    ("123-45--6789", "123-45--6789", "SSN"),
    ("123 \u2013 45-6789", "123 \u2013 45-6789", "SSN"),  # en dash, folded
    ("123\u2013\u201345\u2013\u20136789", "123\u2013\u201345\u2013\u20136789", "SSN"),
    ("4111--1111--1111--1111", "4111--1111--1111--1111", "CREDIT_CARD"),
    ("card 4111 - 1111-1111 - 1111", "4111 - 1111-1111 - 1111", "CREDIT_CARD"),
    ("+1 234--56--7890", "+1 234--56--7890", "PHONE"),  # after a country code: the phone number
])
def test_an_ssn_or_card_with_doubled_or_mixed_dashes_is_found(text, value, type_):
    assert _found(text) == [(value, type_)]
    assert redact(text) == text.replace(value, f"[{type_}]")


def test_lists_of_ssns_with_doubled_dashes_find_every_value():
    assert _found("ssns: 123--45--6789, 234 - 56-7890 and 345-67--8901") == [
        ("123--45--6789", "SSN"), ("234 - 56-7890", "SSN"), ("345-67--8901", "SSN")]


# ------------------------------------------------------------------ a count or an offset before a date
@pytest.mark.parametrize("text", [
    "+1 2023-10-15", "(+1) 2023-10-15", "deadline +1 2023-10-15 12:00", "+15 2023-10-15",
    "votes +3 1999-12-31", "(+2) 2024-02-29 10 30",
])
def test_a_count_before_an_iso_date_is_not_a_phone(text):
    # h-det2's mixed E.164 reading took "+1 2023-10-15" (1 + 8 digits) for a phone number.
    assert _spans(text) == []
    assert redact(text) == text


@pytest.mark.parametrize(("text", "value"), [
    ("+49 3012-34-56", "+49 3012-34-56"),  # no date: the year would be 3012
    ("+49 3012-10-15", "+49 3012-10-15"),
    ("+852 1234-5678", "+852 1234-5678"),
    ("+1 2023-13-15", "+1 2023-13-15"),  # no month 13
    ("+44 20 2023-10", "+44 20 2023-10"),
])
def test_phone_numbers_that_are_no_date_stay_phones(text, value):
    assert _found(text) == [(value, "PHONE")]


# ------------------------------------------------------------------ not findings
@pytest.mark.parametrize("text", [
    # ranges, flags, markdown
    "10--20", "pages 10--20", "1999--2000", "run with --45 flag", "cmd --45 --6789", "|---|---|",
    "| 123 | 45 | 6789 |", "--- | --- | ---",  # "123 -- 45 -- 6789" an SSN since h-det5 (forms5)
    "123---45---6789", "123 -45- 6789",
    # dates and sums with spaced dashes
    "2023 - 10-15", "2023--10--15", "on 2023 - 10 - 15", "2019 - 123--45--6789", "12--123-45--6789",
    "123--45--6789--1", "123 - 45-6789 - 10", "total 5 - 123 - 45-6789", "1 - 2 - 3 - 4 - 5",
    # the SSA rules and Luhn are kept
    "ssn 666--12--3456", "ssn 123--00--6789", "ssn 900 - 45-6789", "card 4111--1111--1111--1112",
    # no country code, or none before the parentheses
    "+0 (234) 56", "+1 (234) 56", "+1234 (56) 78", "f(+1) (234)", "(+44) (0)20 794 x",
    "+1 (0) 234-567",  # the trunk 0 is not dialled: 7 digits
    # dotted numbers after "+N": versions, IPs, decimals, short ones
    "+1 192.168.100.200", "+2 10.0.19041.1", "+1 2.31.0", "+3 3.11.4",
    "+3.14159265", "x+1 234.567.89", "+1 12.34", "+1 1.2.3.4.5.6.7.8",
    # semantic versions with build metadata
    "1.0.0+20130313144700", "1.2.3-beta+exp.sha.5114f85", "v2.1.0+build.123.456.7890",
    "2.0.0-rc.1+build.2023-10-15",
])
def test_ranges_flags_tables_dates_versions_are_not_findings(text):
    assert _spans(text) == []
    assert find_sensitive(text) == []
    assert redact(text) == text


@pytest.mark.parametrize("text", [
    # logs with timestamps, offsets and IPs
    "2023-10-15 12:34:56,789 INFO 192.168.1.100 - - [15/Oct/2023:12:34:56 +0000] \"GET / HTTP/1.1\" 200 1234",
    "Oct 15 12:34:56 host sshd[12345]: Accepted from 10.0.0.1 port 51234 ssh2",
    "2023-10-15T12:34:56+01:00 worker-3 took 123 - 45 ms",
    "[2023-10-15 12:34:56 +0530] pid=23456 uid=1000 rss=123456789",
    "12:00:01 +1 2023-10-15 job 4 of 12 - 45 s",
    # CSV rows and tabular numbers
    "123,45,6789", "1,234,567,8901", "id;qty;price\n123;45;6789.00", "2023-10-15,123,45,6789",
    "  100  25  1000", "| 2023 | 10 - 15 | 1000 |",
    # bibliographies
    "Smith, J. (2019). Title. Journal 12(3), 234-567. doi:10.1234/5678",
    "Phys. Rev. Lett. 123, 045--678 (2019)", "pp. 123--145, 2019", "vol. 12, no. 3, pp. 45--67",
])
def test_logs_csv_and_citations_are_not_findings(text):
    assert _spans(text) == []


@pytest.mark.parametrize(("text", "want"), [
    ("+0 (234) 567-8901", [("(234) 567-8901", "PHONE")]),  # no country code 0: the NANP part
    ("x+1 (234) 567-8901", [("1 (234) 567-8901", "PHONE")]),  # "+" glued to a letter: its trunk 1 (h-det4)
    ("+1 (234) 567.8901", [("+1 (234) 567.8901", "PHONE")]),  # dots after the parentheses (h-det4)
    ("SSN 123 - 45-6789, +1 (234) 567-8901", [("123 - 45-6789", "SSN"), ("+1 (234) 567-8901", "PHONE")]),
])
def test_the_rules_edges(text, want):
    assert _found(text) == want


# ------------------------------------------------------------------ QDRANT_GUARD_IMPLEMENTATION=python
def test_the_python_implementation_finds_the_same_forms():
    texts = ["+44 (0)20 7946 0958", "+1 (234) 567-8901", "+1 234.567.8901", "ssn 123--45--6789",
             "ssn 123 - 45-6789", "+1 2023-10-15"]
    assert python_process(texts) == ["[PHONE]", "[PHONE]", "[PHONE]", "ssn [SSN]", "ssn [SSN]", "+1 2023-10-15"]


# ------------------------------------------------------------------ through the guarded client
@pytest.mark.parametrize(("value", "placeholder"), [
    ("+44 (0)20 7946 0958", "[PHONE]"), ("+1 234.567.8901", "[PHONE]"), ("123--45--6789", "[SSN]"),
])
def test_a_query_with_such_a_value_reaches_the_embedder_redacted(tmp_path, value, placeholder):
    assert embedded_query(tmp_path, f"claims of ssn {value} please") == [f"claims of ssn {placeholder} please"]
