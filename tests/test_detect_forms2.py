"""Detector forms left open by the previous pass (docs/security-testing.md, "Detector forms:
enclosed digits and mixed separators", and the entry after it): a phone number with a country code
read as an SSN (``+1 234-56-7890``), SSNs with ``.`` or `` - `` between their groups, and phone
numbers and IBANs whose groups mix spaces and hyphens.

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


def _assert_found(text: str, value: str, type_: str) -> None:
    assert _found(text) == [(value, type_)]
    assert redact(text) == text.replace(value, f"[{type_}]")


# ------------------------------------------------------------------ a country code before the number
@pytest.mark.parametrize(("text", "value"), [
    ("+1 234-56-7890", "+1 234-56-7890"),
    ("call me at +44 234-56-7890 today", "+44 234-56-7890"),
    ("tel +49 123-45-6789", "+49 123-45-6789"),
    ("(+1) 234-56-7890", "(+1) 234-56-7890"),
    ("phone: (+44)20 7946-0958.", "(+44)20 7946-0958"),
    ("(+353) 87 123 4567", "(+353) 87 123 4567"),
    ("+1 234 56-7890", "+1 234 56-7890"),
    ("+1 800-555 0199", "+1 800-555 0199"),
    ("+44 20-7946 0958", "+44 20-7946 0958"),
    ("+33 6 12-34-56 78", "+33 6 12-34-56 78"),
    ("+123-45 6789", "+123-45 6789"),
    ("+1 234\u201356\u20137890", "+1 234\u201356\u20137890"),  # en dashes, folded to "-"
])
def test_a_number_after_a_country_code_is_a_phone_not_an_ssn(text, value):
    # "+1 234-56-7890" was an SSN (the 3-2-4 after "+1 "), "(+1) 234-56-7890" too, and "+44
    # 20-7946 0958" nothing: the E.164 rule read one separator and no parenthesised country code.
    _assert_found(text, value, "PHONE")
    assert _spans(text)[0][3] == "e164"


@pytest.mark.parametrize(("text", "want"), [
    ("SSN: 234-56-7890", [("234-56-7890", "SSN")]),
    ("call +1 555 0100, ssn 234-56-7890", [("+1 555 0100", "PHONE"), ("234-56-7890", "SSN")]),
    ("x+1 234-56-7890", [("234-56-7890", "SSN")]),  # "+" glued to a letter: no country code
    ("+0 234-56-7890", [("234-56-7890", "SSN")]),  # no country code starts with 0
    ("+1 234-56-7890 123-45-6789", [("+1 234-56-7890", "PHONE"), ("123-45-6789", "SSN")]),
    ("ssn 123-45-6789, tel +1 555-123-4567", [("123-45-6789", "SSN"), ("+1 555-123-4567", "PHONE")]),
])
def test_real_ssns_near_phone_numbers_are_still_ssns(text, want):
    assert _found(text) == want


# ------------------------------------------------------------------ "." and " - " between an SSN's groups
@pytest.mark.parametrize(("text", "value", "type_"), [
    ("ssn 123.45.6789", "123.45.6789", "SSN"),
    ("my number is 123.45.6789.", "123.45.6789", "SSN"),  # as "123-45-6789": no context needed
    ("ssn (234.56.7890)", "234.56.7890", "SSN"),
    ("ssn \uff11\uff12\uff13\uff0e\uff14\uff15\uff0e\uff16\uff17\uff18\uff19",
     "\uff11\uff12\uff13\uff0e\uff14\uff15\uff0e\uff16\uff17\uff18\uff19", "SSN"),  # full-width stops
    ("ssn 123%2E45%2E6789", "123%2E45%2E6789", "SSN"),
    ("123 - 45 - 6789", "123 - 45 - 6789", "SSN"),
    ("ssn 123 \u2013 45 \u2013 6789", "123 \u2013 45 \u2013 6789", "SSN"),  # en dashes
    ("ssn 123 \u2014 45 \u2014 6789 ok", "123 \u2014 45 \u2014 6789", "SSN"),  # em dashes
    ("ssn 123\u00a0-\u00a045\u00a0-\u00a06789", "123\u00a0-\u00a045\u00a0-\u00a06789", "SSN"),
    ("card 4111 - 1111 - 1111 - 1111", "4111 - 1111 - 1111 - 1111", "CREDIT_CARD"),
    ("amex 3782 - 822463 - 10005.", "3782 - 822463 - 10005", "CREDIT_CARD"),
])
def test_an_ssn_with_dots_or_spaced_dashes_is_found(text, value, type_):
    # The chain read "." as a separator of phone numbers only, and separators of one character.
    _assert_found(text, value, type_)


def test_lists_of_dotted_and_spaced_ssns_find_every_value():
    text = "ssn 123.45.6789 and 234.56.7890; 345 - 67 - 8901"
    assert _found(text) == [("123.45.6789", "SSN"), ("234.56.7890", "SSN"), ("345 - 67 - 8901", "SSN")]
    assert redact(text) == "ssn [SSN] and [SSN]; [SSN]"


# ------------------------------------------------------------------ phones and IBANs with mixed separators
@pytest.mark.parametrize(("text", "value", "type_"), [
    ("1-800 555-0199", "1-800 555-0199", "PHONE"),
    ("call 555 123-4567", "555 123-4567", "PHONE"),
    ("fax 800 555-0199.", "800 555-0199", "PHONE"),
    ("tel 1 800 555-0199", "1 800 555-0199", "PHONE"),
    ("IBAN DE89 3704-0044 0532-0130 00", "DE89 3704-0044 0532-0130 00", "IBAN"),
    ("GB82-WEST 1234-5698 7654-32", "GB82-WEST 1234-5698 7654-32", "IBAN"),
    ("iban de89 3704-0044 0532-0130 00", "de89 3704-0044 0532-0130 00", "IBAN"),
    ("FR14 2004-1010 0505-0001 3M02 606", "FR14 2004-1010 0505-0001 3M02 606", "IBAN"),
])
def test_a_phone_or_iban_with_mixed_separators_is_found(text, value, type_):
    _assert_found(text, value, type_)


def test_lists_of_phones_with_mixed_separators_find_every_value():
    text = "phones 1-800 555-0199 555 123-4567"
    assert _found(text) == [("1-800 555-0199", "PHONE"), ("555 123-4567", "PHONE")]


# ------------------------------------------------------------------ not findings
@pytest.mark.parametrize("text", [
    # dates
    "2023.10.15", "on 15.10.2023", "2023.10.1234", "10.45.6789", "dated 2024-01 15",
    # version strings
    "1.2.3", "version 10.45.6789", "v123.45.6789", "release 123.45.6789.1", "Chrome 120.0.6099.109",
    "build 3.12.1234",
    # IP addresses
    "192.168.10.1", "ip 10.123.45.6789", "host 123.45.67.89",
    # decimal numbers and number lists
    "price 123.45", "123.45 6789", "total 123.456.789", "1.234.567,89", "1.2.3.4.5.6.7.8",
    "sizes 123.45.6789.1024", "x = 123 - 45 - 6789x", "1990 - 2000 - 2010", "scores 12 - 34 - 5678",
    "2019 - 123 - 45 - 6789", "123 - 45 - 6789 - 1", "rows 100-200 300-400 500",
    # ISBNs and order numbers
    "ISBN 978-0-13-110362-7", "ISBN 0-13-110362-8", "ISBN 978 0 13 110362 7", "order #12-3456-789",
    "PO 1234-567 89", "order 123.4567.89",
    # the SSA rules, Luhn and the separators' rules are kept
    "ssn 000.12.3456", "ssn 666.12.3456", "ssn 923.45.6789", "ssn 123.00.6789", "ssn 123.45.0000",
    "ssn 078.05.1120", "ssn 666 - 12 - 3456", "card 4111 - 1111 - 1111 - 1112",
    "ssn 123 -45- 6789", "ssn 123  -  45  -  6789", "ssn 123.45-6789",
    # phone shapes the NANP rule does not take, mixed or not
    "555-123 456", "055 123-4567", "155 123-4567", "1-080 555-0199", "tel 020 7946-0958",
    # a space before the last group: page ranges and a year ("Monthly 77, 259-264 1970", as the
    # stdlib's sources cite), so no NANP number with mixed separators ends so with a year (h-det4:
    # "555-123 4567" and "1 800-555 0199" are phones, tests/test_detect_forms4.py)
    "Math. Monthly 77, 259-264 1970.", "pp. 259-264 2019", "tel 1 800-555 1999",
    "+1 234-56", "+0 12-345 678", "+1 234 - 00 - 7890",
    # IBAN shapes that are not IBANs
    "GB82-WEST 1234-5698 7654-33", "GB82 WEST-1234 5698-7654 32-99", "GB82 WEST 1234-5698 765-432",
])
def test_dates_versions_ips_lists_isbns_and_order_numbers_are_not_findings(text):
    assert _spans(text) == []
    assert find_sensitive(text) == []
    assert redact(text) == text


@pytest.mark.parametrize(("text", "want"), [
    ("+1 234.56.7890", [("+1 234.56.7890", "PHONE")]),
    ("tel +44 123.45.6789.", [("+44 123.45.6789", "PHONE")]),
    ("(+1) 234.56.7890", [("(+1) 234.56.7890", "PHONE")]),
    ("+1 234 - 56 - 7890", [("+1 234 - 56 - 7890", "PHONE")]),
    ("(+1)234 \u2013 56 \u2013 7890", [("(+1)234 \u2013 56 \u2013 7890", "PHONE")]),
    ("x+1 234.56.7890", [("234.56.7890", "SSN")]),  # "+" glued to a letter: no country code
    ("1-234-56-7890", [("1-234-56-7890", "PHONE")]),  # a trunk 1, then the 3-2-4 (h-det4)
    ("1-123.45.6789", []),
])
def test_a_dotted_or_spaced_ssn_shape_after_a_country_code_is_that_phone_number(text, want):
    # The E.164 rule reads spaces and hyphens only; a 3-2-4 with "." or " - " after "+CC " is the
    # rest of the phone number, which is found whole, not an SSN after a bit of it in the clear.
    assert _found(text) == want


# ------------------------------------------------------------------ QDRANT_GUARD_IMPLEMENTATION=python
def test_the_python_implementation_finds_the_same_forms():
    texts = ["+1 234-56-7890", "(+1) 234-56-7890", "ssn 123.45.6789", "ssn 123 \u2013 45 \u2013 6789",
             "1-800 555-0199", "GB82-WEST 1234-5698 7654-32", "2023.10.15 192.168.10.1"]
    assert python_process(texts) == ["[PHONE]", "[PHONE]", "ssn [SSN]", "ssn [SSN]", "[PHONE]", "[IBAN]",
                                   "2023.10.15 192.168.10.1"]


# ------------------------------------------------------------------ through the guarded client
@pytest.mark.parametrize(("value", "placeholder"), [
    ("123.45.6789", "[SSN]"), ("123 \u2013 45 \u2013 6789", "[SSN]"), ("+1 234-56-7890", "[PHONE]"),
])
def test_a_query_with_such_a_value_reaches_the_embedder_redacted(tmp_path, value, placeholder):
    assert embedded_query(tmp_path, f"claims of ssn {value} please") == [f"claims of ssn {placeholder} please"]
