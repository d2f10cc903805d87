"""Tests written against mutants of native/detect.c that the suite let through (scripts/mutate_c.py).

Each case names the mutant it kills (detect.c line and mutation at the time of the pass). Every case
runs through both twins with the oracle helper (native and reference must agree on it) and then
through the public API, qdrant_guard.detect.find_sensitive, against the expected findings.
"""
from __future__ import annotations

import pytest

from qdrant_guard.detect import find_sensitive
from tests.oracle import assert_same, both

NATIVE, PYTHON = both("detect")

# (text, [(type, secret substring), ...])
CASES = [
    # ssa_valid: area >= 900 -> area >= 899 (899 is the highest area the SSA assigns)
    ("SSN 899-12-3456", [("SSN", "899-12-3456")]),
    # ssa_valid: the serial rule "d[5..8] all '0'" with its second && made || rejected any serial
    # that begins or ends with "00"; only 0000 is void
    ("SSN 123-45-6700", [("SSN", "123-45-6700")]),
    ("SSN 123-45-0067", [("SSN", "123-45-0067")]),
    ("SSN 123-45-0670", [("SSN", "123-45-0670")]),
    ("SSN 001-01-0001", [("SSN", "001-01-0001")]),  # the lowest valid area, group and serial
    # chain_match: a bare 9-digit number after an SSN keyword that breaks the SSA rules; with
    # "return 0" -> "return 1" the chain reported a finding it never filled in
    ("ssn 900123456", []),
    ("SSN: 123006789", []),
    ("social security 666123456", []),
    ("ssn 123450000", []),
    ("ssn 078051120", []),  # the advertising number
    # mod97: "v >= 10" -> "v > 10" (or >= 11) took the letter A (value 10) for a digit; no other
    # test IBAN had an A in it
    ("IBAN AT61 1904 3002 3457 3201", [("IBAN", "AT61 1904 3002 3457 3201")]),
    ("iban AT611904300234573201", [("IBAN", "AT611904300234573201")]),
    # aws_secret: "!(lo && up && dg)" with either && made || took 40-character values that lack
    # lower case, upper case or digits (the rule wants all three); the control first
    ("aws secret Kq2mZ8vT4xR/nW1pL6yB3cH9dF0gJ5sA2eU8iO+t", [("AWS_SECRET_KEY", "Kq2mZ8vT4xR/nW1pL6yB3cH9dF0gJ5sA2eU8iO+t")]),
    ("aws secret k9/2mz8vt4xr/nw1pl6yb3ch9df0gj5sa2eu8io+", []),
    ("aws secret Kq/mZvTxR/nWpLyBcHdFgJsAeUiO+tKqWmZvTxRn", []),
    ("aws secret KQ2MZ8VT4XR/NW1PL6YB3CH9DF0GJ5SA2EU8IO+T", []),
    # is_uuid: "n != 36" -> "n == 36" dropped the UUID filter, and no test noticed: the one UUID
    # among the negatives has too little entropy to be a secret with or without it. This one is
    # a GENERIC_SECRET without the filter (checked on the reference with _is_uuid stubbed out).
    # The same filter's shape rules (one mutant each): every group checked, so a non-hex last group
    # ("g < 5" -> "g < 4"), a 37th character, and a separator other than '-' are no UUID.
    ('api_key = "9b2f4e1a-7c3d-4a5b-8e6f-0d1c2b3a4f5e"', []),
    ('api_key = "9b2f4e1a-7c3d-4a5b-8e6f-0d1c2b3a4fzq"', [("GENERIC_SECRET", "9b2f4e1a-7c3d-4a5b-8e6f-0d1c2b3a4fzq")]),
    ('api_key = "9b2f4e1a-7c3d-4a5b-8e6f-0d1c2b3a4f5e0"', [("GENERIC_SECRET", "9b2f4e1a-7c3d-4a5b-8e6f-0d1c2b3a4f5e0")]),
    ('api_key = "9b2f4e1a-7c3d-4a5b-8e6f_0d1c2b3a4f5e"', [("GENERIC_SECRET", "9b2f4e1a-7c3d-4a5b-8e6f_0d1c2b3a4f5e")]),
    # is_placeholder: contains "xxxx" || contains "****" -> &&: each alone marks a placeholder
    ("db_password: Hq8#kLm2$pQr9vXz", [("GENERIC_SECRET", "Hq8#kLm2$pQr9vXz")]),  # the control
    ("db_password: Hq8#****$pQr9vXz", []),
    ("db_password: Hq8#xxxx$pQr9vXz", []),
    # -- the second pass (scripts/mutate_c.py; docs/security-testing.md, "Mutation pass 2")
    # card_groups_ok (line 274): "k < ng - 1" -> "k <= ng - 1" also wanted the last group to be 4
    # digits; a last group of 1 to 3 digits after groups of 4 is a card (13, 15 digits)
    ("card 4111 7392 0184 650", [("CREDIT_CARD", "4111 7392 0184 650")]),
    ("card 4111-7392-0184-650", [("CREDIT_CARD", "4111-7392-0184-650")]),
    # card_groups_ok (line 276): "g[ng - 1] >= 1" -> "> 1" or ">= 2" refused a last group of one
    # digit (4-4-4-1, a 13-digit Visa)
    ("card 4111 7392 0184 7", [("CREDIT_CARD", "4111 7392 0184 7")]),
    # iin_known (line 256): Mastercard's 2-series 2221..2720 widened at the low end (2221 - 1 took
    # 2220) or narrowed at the high end ("<= 2720" -> "<", which lost 2720); no test card came from
    # the 2-series ends
    ("card 2220739201846576", []),
    ("card 2221739201846575", [("CREDIT_CARD", "2221739201846575")]),
    ("card 2720739201846571", [("CREDIT_CARD", "2720739201846571")]),
    ("card 2721739201846570", []),
    # iin_known (line 256): "p2 == 34" -> "p2 == 35" lost American Express's 34 prefix (every test
    # Amex number began 37)
    ("card 347392018465735", [("CREDIT_CARD", "347392018465735")]),
    # iban (line 460): "glen == 0 || glen > 4" -> "&&" let a group of 5 characters through (the
    # run is read up to 5): a valid IBAN regrouped 4-4-4-4-5-1 is no grouped IBAN
    ("iban GB82 WEST 1234 5698 76543 2", []),
    ("iban GB82 WEST 1234 5698 7654 32", [("IBAN", "GB82 WEST 1234 5698 7654 32")]),
    # iban (line 460): "count + glen > length" joined by "&&" to either neighbour took a last group
    # that runs past the country's length (22 for GB: a 24-character run, checked on its first
    # 22), and the second also a 3-character group in the middle
    ("iban GB82 WEST 1234 5698 7654 3210", []),
    ("iban GB82 WES T123 4569 8765 432", []),
    # -- the third pass (scripts/mutate_c.py; docs/security-testing.md, "Mutation pass 3")
    # email (line 488): "p - ls > 64" -> ">= 64" or "> 63" refused a local part of exactly 64
    # characters, the most RFC 5321 allows; 65 is refused
    ("mail " + "a" * 64 + "@corp.io", [("EMAIL", "a" * 64 + "@corp.io")]),
    ("mail " + "a" * 65 + "@corp.io", []),
    # email (line 490): "ls == p || b[p - 1] == '.'" -> "&&" took an empty local part
    # ("@corp.io") and one that ends in a dot
    ("mail @corp.io", []),
    ("mail john.@corp.io", []),
    ("mail .john@corp.io", [("EMAIL", "john@corp.io")]),  # leading dots are stripped, not refused
    # email (line 494): the domain run's 255 limit, "> 255" -> ">= 255" / "> 254" refused a
    # 255-character domain, "> 256" took a 256-character one (the run is read up to 256)
    ("mail a@" + ".".join(["b" * 63] * 3) + "." + "c" * 60 + ".io",
     [("EMAIL", "a@" + ".".join(["b" * 63] * 3) + "." + "c" * 60 + ".io")]),
    ("mail a@" + ".".join(["b" * 63] * 3) + "." + "c" * 61 + ".io", []),
    # email (line 503): a label of 63 characters is the most; "len > 63" -> ">= 63" / "> 62"
    # refused it, "> 64" or "len > 63 && b[a] == '-'" took 64; either "||" around the dash rules
    # made "&&" took a label that begins or ends with "-"
    ("mail a@" + "b" * 63 + ".io", [("EMAIL", "a@" + "b" * 63 + ".io")]),
    ("mail a@" + "b" * 64 + ".io", []),
    ("mail a@-corp.io", []),
    ("mail a@corp-.io", []),
    # email (line 514): the look-back for "://" (user@host in a URL authority is no address)
    # stops after 256 characters of URL text ("&&" -> "||" made it unbounded), must reach the
    # text's first character ("k > 0" -> "k > 1" did not) and stops at a space
    ("see https://" + ":" * 253 + "u@corp.io", []),
    ("see https://" + ":" * 254 + "u@corp.io", [("EMAIL", "u@corp.io")]),
    ("://u@corp.io", []),
    # ... and only in the authority: past its end ("/", and for a scheme other than a database's
    # "?" or "#") an address is one (a path, its query or a fragment)
    ("see https://x.example/img.png?who=u@corp.io", [("EMAIL", "u@corp.io")]),
    ("see https://x.example/u@corp.io/profile", [("EMAIL", "u@corp.io")]),
    ("see https://a@corp.io/x", []),
    ("see https://x.example?who=u@corp.io", [("EMAIL", "u@corp.io")]),
    ("see ftp://a/b https://u@corp.io", []),
    ("see https://example.com/ a@corp.io", [("EMAIL", "a@corp.io")]),
    # chain_match, E.164 (line 295): "+" and 8 to 15 digits; "nd >= 8" -> "> 8" / ">= 9" lost an
    # 8-digit number, ">= 7" took 7 digits, "<= 16" took 16
    ("call +12345678", [("PHONE", "+12345678")]),
    ("call +1234567", []),
    ("call +123456789012345", [("PHONE", "+123456789012345")]),
    ("call +1234567890123456", []),
    # chain_match, NANP with a leading 1 (line 316): the area code's first digit is 2-9;
    # "d[1] >= '2'" -> "> '2'" / ">= '3'" lost the 2xx area codes (every test used 8xx or 5xx)
    ("call 1-255-123-4567", [("PHONE", "1-255-123-4567")]),
    ("call 1-155-123-4567", []),
    # chain_match, the local form "(NXX) XXX-XXXX" (lines 321-325): "gap >= 0" -> "gap > 0" /
    # ">= 1" never tried the form without the space, "(555)123-4567"; "p >= 0" -> "p > 0" /
    # ">= 1" lost it at the start of the text; "groups == 3-4 && sep == '-'" -> "||" took
    # other separators; "gap == 0 || b[p + 5] == ' '" -> "!=" took any character for the space
    ("call (555)123-4567", [("PHONE", "(555)123-4567")]),
    ("(555) 123-4567", [("PHONE", "(555) 123-4567")]),
    ("(555)123-4567", [("PHONE", "(555)123-4567")]),
    ("call (555) 123 4567", []),
    ("call (555) 123.4567", [("PHONE", "(555) 123.4567")]),  # dots after the area code: h-det4
    ("call (555)x123-4567", []),
    # cuts_later (line 347): a later number's finding cuts the prefix only when it runs PAST the
    # prefix's end; "later.end > end" -> ">=" also vetoed "1 555 123 4567" because "555 123 4567"
    # inside it ends at the same place, and left the leading "1 " out of the finding
    ("call 1 555 123 4567 8", [("PHONE", "1 555 123 4567")]),
    # chain_find (line 369): the first 19 digits are kept for the rules; "nd < 19" -> "nd < 18"
    # left the 19th unset, so a 19-digit card (the longest there is) failed Luhn on garbage;
    # no test card had 19 digits
    ("card 4111739201846573015", [("CREDIT_CARD", "4111739201846573015")]),
    ("card 4111739201846573010", []),
    # chain_find (line 376): a chain stops after 6 groups, and is "whole" unless the same
    # separator and a digit follow; a 6-group E.164 number followed by a space and a digit is
    # whole. With any of the three joins flipped ("&&" -> "||" twice, "b[j] == sep" -> "!=") it
    # counted as running on and, its separator not being a space, was dropped
    ("call +44-20-79-46-09-58 1", [("PHONE", "+44-20-79-46-09-58")]),
    ("call +44-20-79-46-09-58-12", []),
    # iin_known (lines 257-259, mutants 25-75 of the pass): no test held a valid card of Discover's
    # 65 and 644-649, Diners (300-305, 36, 38), JCB (3528-3589), UnionPay (62) or Maestro (50, 56-58,
    # 67), so their range ends and "||" -> "&&" went unnoticed; one card per prefix and per range
    # end, and the unknown neighbours (643, 299, 306, 3527, 3590, 63)
    ('card 657392018465739', [('CREDIT_CARD', '657392018465739')]),
    ('card 6447392018465731', [('CREDIT_CARD', '6447392018465731')]),
    ('card 6437392018465733', []),
    ('card 6497392018465730', [('CREDIT_CARD', '6497392018465730')]),
    ('card 3007392018465730', [('CREDIT_CARD', '3007392018465730')]),
    ('card 2997392018465734', []),
    ('card 3057392018465739', [('CREDIT_CARD', '3057392018465739')]),
    ('card 3067392018465737', []),
    ('card 367392018465730', [('CREDIT_CARD', '367392018465730')]),
    ('card 387392018465736', [('CREDIT_CARD', '387392018465736')]),
    ('card 3528739201846573', [('CREDIT_CARD', '3528739201846573')]),
    ('card 3527739201846574', []),
    ('card 3589739201846579', [('CREDIT_CARD', '3589739201846579')]),
    ('card 3590739201846576', []),
    ('card 627392018465736', [('CREDIT_CARD', '627392018465736')]),
    ('card 637392018465734', []),
    ('card 507392018465731', [('CREDIT_CARD', '507392018465731')]),
    ('card 567392018465738', [('CREDIT_CARD', '567392018465738')]),
    ('card 577392018465736', [('CREDIT_CARD', '577392018465736')]),
    ('card 587392018465734', [('CREDIT_CARD', '587392018465734')]),
    ('card 677392018465735', [('CREDIT_CARD', '677392018465735')]),
    # email, the URL's authority: RFC 3986 ends it at '/', '?' or '#'; an address past a '?' or
    # '#' is in the query or fragment and is found (before: only '/' ended it, and these were left)
    ("https://x.example?who=alice@example.com", [("EMAIL", "alice@example.com")]),
    ("https://x.example#contact=bob@corp.io", [("EMAIL", "bob@corp.io")]),
    ("see HTTP://x.example:8080?to=carol@example.org now", [("EMAIL", "carol@example.org")]),
    ("git+https://x.example?u=dan@example.net", [("EMAIL", "dan@example.net")]),
    # ... still the authority: userinfo is no address, in any scheme
    ("https://user@host.example.com", []),
    ("https://user:pw@host.example.com/x", []),
    # a database URL's authority ends at '/' alone (passwords hold '?' and '#' unescaped): its
    # password is found, the tail after '@' is not read as an address
    ("mongodb+srv://u:Zq9#x!T2@cluster0.example.net", [("DATABASE_URL_PASSWORD", "Zq9#x!T2")]),
    ("postgresql+asyncpg://app:a?b7Kq@db.internal.example.com", [("DATABASE_URL_PASSWORD", "a?b7Kq")]),
    ("REDIS://u:p#9x@cache.example.com", [("DATABASE_URL_PASSWORD", "p#9x")]),
    # ... and past its first '/' an address is found, as before
    ("postgres://app:s3cretPw@db.example.com/app?notify=ops@example.com",
     [("DATABASE_URL_PASSWORD", "s3cretPw"), ("EMAIL", "ops@example.com")]),
    # a density written with a decimal is an image, as icon@2x.png is; other dotted shapes are not
    ("https://cdn.example.com/icon@1.5x.png", []),
    ("a@1.5x.png", []),
    ("a@1.5.5x.png", [("EMAIL", "a@1.5.5x.png")]),
    ("a@1.x.png", [("EMAIL", "a@1.x.png")]),
]


@pytest.mark.parametrize(("text", "expected"), CASES)
def test_native_and_reference_agree_and_are_right(text: str, expected: list[tuple[str, str]]) -> None:
    spans = assert_same(NATIVE.find_spans, PYTHON.find_spans, text)
    assert [(t, text[a:b]) for a, b, t, _ in spans] == expected
    assert [(f.type, text[f.start:f.end]) for f in find_sensitive(text)] == expected
