"""Pure-Python reference of the secret/PII detector: the specification the native twin must match.

The kernel returns raw findings ``(start, end, type, validator)`` with code-point offsets, sorted
by ``(start, end)``; :mod:`qdrant_guard.detect` wraps them in ``Finding`` objects and redacts.

Every detector is a pure function of the text and one anchor position, so the twins agree no
matter how they enumerate anchors. All character classes are ASCII: any non-ASCII code point
(including lone surrogates) is "other" and never part of a match, which is also what the native
kernel sees in the UTF-8 bytes. Keyword windows ("ssn" near a bare 9-digit number, "aws" near a
40-character key) are measured in code points.

Candidate selection (overlaps): candidates are taken longest first; on equal length the type that
comes first in :data:`FINDING_TYPES` wins, then the earlier start. A candidate that overlaps one
already taken is dropped. The survivors never overlap. Then each card :func:`_card_floor` reads
(from every digit group, whatever number is glued to it) gets a CREDIT_CARD finding over every
stretch of it that the survivors leave uncovered (:func:`_cover_cards`), taking in the uncovered
digit groups glued before the card by a dash or a dot, and a parenthesised area code
(:func:`_glued_start`).
"""
from __future__ import annotations

import base64
from bisect import bisect_left
import math
from collections.abc import Iterator

from .errors import GuardArgumentTypeError

__all__ = ["FINDING_TYPES", "PII_TYPES", "find_spans"]

#: Every finding type, strongest first (the order breaks ties between equally long overlaps).
FINDING_TYPES: tuple[str, ...] = (
    "PRIVATE_KEY",
    "AWS_ACCESS_KEY",
    "AWS_SECRET_KEY",
    "GITHUB_TOKEN",
    "GITLAB_TOKEN",
    "SLACK_TOKEN",
    "STRIPE_KEY",
    "ANTHROPIC_KEY",
    "OPENAI_KEY",
    "GOOGLE_API_KEY",
    "GOOGLE_OAUTH_SECRET",
    "NPM_TOKEN",
    "PYPI_TOKEN",
    "SENDGRID_KEY",
    "TWILIO_KEY",
    "HUGGINGFACE_TOKEN",
    "SHOPIFY_TOKEN",
    "DIGITALOCEAN_TOKEN",
    "MAILGUN_KEY",
    "DATABRICKS_TOKEN",
    "POSTMAN_KEY",
    "LINEAR_KEY",
    "DOPPLER_TOKEN",
    "AZURE_STORAGE_KEY",
    "JWT",
    "DATABASE_URL_PASSWORD",
    "GENERIC_SECRET",
    "IBAN",
    "CREDIT_CARD",
    "SSN",
    "EMAIL",
    "PHONE",
)
PII_TYPES: frozenset[str] = frozenset({"IBAN", "CREDIT_CARD", "SSN", "EMAIL", "PHONE"})
_RANK = {t: i for i, t in enumerate(FINDING_TYPES)}

# ------------------------------------------------------------------------ character classes
_DIGITS = frozenset("0123456789")
_UPPER = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZ")
_LOWER = frozenset("abcdefghijklmnopqrstuvwxyz")
_LETTERS = _UPPER | _LOWER
_ALNUM = _DIGITS | _LETTERS
_WORD = _ALNUM | {"_"}
# Numbers (SSN, card, IBAN, phone) end at letters and digits only: "_123-45-6789_" (Markdown
# emphasis) or "ssn_123456789" is still the number.
_WORD_DASH = _WORD | {"-"}
_ALNUM_DASH = _ALNUM | {"-"}
_B64 = _ALNUM | {"+", "/"}
_HEX = frozenset("0123456789abcdefABCDEF")
_PRINTABLE = frozenset(chr(c) for c in range(0x21, 0x7F))
_LOWER_TABLE = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


def _lower(s: str) -> str:
    # str.lower() maps some non-ASCII letters (KELVIN SIGN) onto ASCII; the C twin cannot.
    return s.translate(_LOWER_TABLE)


def _at(text: str, i: int) -> str:
    return text[i] if 0 <= i < len(text) else ""


def _run_end(text: str, i: int, chars: frozenset[str], limit: int) -> int:
    """End of the run of ``chars`` starting at ``i``, reading at most ``limit`` characters."""
    n = min(len(text), i + limit)
    j = i
    while j < n and text[j] in chars:
        j += 1
    return j


def _positions(text: str, literal: str) -> Iterator[int]:
    i = text.find(literal)
    while i != -1:
        yield i
        i = text.find(literal, i + 1)


# The context of a bare SSN: "ssn" as a word (_ssn_word), or "social" and "security" joined by a
# space, "_", "-" or nothing (JSON/YAML keys spell it social_security_number or socialSecurityNumber).
_SOCIAL_WORDS = ("social security", "social_security", "social-security", "socialsecurity")


def _ascii_alpha(ch: str) -> bool:
    return ("a" <= ch <= "z") or ("A" <= ch <= "Z")


def _ssn_word(text: str, start: int) -> bool:
    """"ssn" in the 40 characters before ``start`` as a word of its own: "SSN", or not glued to a
    letter before it, or starting a camelCase word ("userSsn"). Any "ssn" also matched
    "businessNumber" and "classNumber"."""
    w = max(0, start - 40)
    window = _lower(text[w:start])
    i = window.find("ssn")
    while i != -1:
        p = w + i
        if (text[p : p + 3] == "SSN" or p == 0 or not _ascii_alpha(text[p - 1])
                or (text[p] == "S" and "a" <= text[p - 1] <= "z")):
            return True
        i = window.find("ssn", i + 1)
    return False


def _ssn_context(text: str, start: int) -> bool:
    return _ssn_word(text, start) or _window_has(text, start, 40, _SOCIAL_WORDS)


def _window_has(text: str, start: int, width: int, keywords: tuple[str, ...]) -> bool:
    window = _lower(text[max(0, start - width) : start])
    return any(k in window for k in keywords)


def entropy(value: str) -> float:
    """Shannon entropy in bits per character of an ASCII string (counts summed in code order)."""
    n = len(value)
    counts = [0] * 128
    for ch in value:
        counts[ord(ch)] += 1
    h = 0.0
    for c in counts:
        if c:
            p = c / n
            h -= p * math.log2(p)
    return h


_PLACEHOLDER_WORDS = frozenset(
    {
        "password", "passwd", "pass", "pwd", "secret", "changeme", "changeit", "redacted",
        "placeholder", "dummy", "test", "none", "null", "empty", "todo", "fixme", "admin",
        "root", "default", "hunter2", "letmein", "token", "apikey", "api_key", "mypassword",
        "yourpassword",
    }
)
_PLACEHOLDER_PREFIXES = ("$", "{{", "<", "%(", "%{", "#{", "your", "insert", "replace", "enter_", "enter-")


def is_placeholder(value: str) -> bool:
    """True for values that stand in for a secret: templates, env references, masks, examples."""
    if not value:
        return True
    low = _lower(value)
    if "example" in low or "xxxx" in low or "****" in low:
        return True
    if low.startswith(_PLACEHOLDER_PREFIXES):
        return True
    if value.count(value[0]) == len(value):
        return True
    return low in _PLACEHOLDER_WORDS


def _has_example(text: str, start: int, end: int) -> bool:
    return "example" in _lower(text[start:end])


# -------------------------------------------------------------------------- numeric chains
_CHAIN_SEPS = frozenset(" -.")
_MAX_GROUPS = 6
_ADVERTISING_SSNS = frozenset({"078051120", "219099999"})


def _ssa_valid(d: str) -> bool:
    area, group, serial = int(d[0:3]), d[3:5], d[5:9]
    if area == 0 or area == 666 or area >= 900 or group == "00" or serial == "0000":
        return False
    return d not in _ADVERTISING_SSNS


def _luhn(d: str) -> bool:
    total = 0
    for k, ch in enumerate(reversed(d)):
        v = ord(ch) - 48
        if k % 2 == 1:
            v *= 2
            if v > 9:
                v -= 9
        total += v
    return total % 10 == 0


def _iin_known(d: str) -> bool:
    p2, p3, p4 = int(d[:2]), int(d[:3]), int(d[:4])
    return (
        d[0] == "4"  # Visa
        or 51 <= p2 <= 55 or 2221 <= p4 <= 2720  # Mastercard
        or p2 in (34, 37)  # American Express
        or p4 == 6011 or p2 == 65 or 644 <= p3 <= 649  # Discover
        or 300 <= p3 <= 305 or p2 in (36, 38)  # Diners Club
        or 3528 <= p4 <= 3589  # JCB
        or p2 == 62  # UnionPay
        or p2 in (50, 56, 57, 58) or p2 == 67  # Maestro
    )


def _card_groups_ok(groups: list[int], sep: str) -> bool:
    if len(groups) == 1:
        return True
    if sep not in (" ", "-", "."):
        return False
    if groups in ([4, 6, 5], [4, 6, 4]):
        return True
    return all(g == 4 for g in groups[:-1]) and 1 <= groups[-1] <= 4


def _chain(text: str, i: int, veto: bool = True) -> list[tuple[int, int, str, str]]:
    """The finding of the number run from ``i``: after a parenthesised country code as a phone
    number, else after a country code with a dot mixed into its separators (``_e164_dotmix``),
    else read with one consistent separator, else after a ``+`` as a phone number with
    spaces and hyphens mixed (or ``+CC (area) rest``, ``_e164_paren``), else (an SSN, a card or a
    NANP phone number) with spaces and hyphens mixed (``123-45 6789``, ``4111-1111 1111-1111``),
    else (an SSN or a card) with dashes, doubled or spaced, between its groups (``123 - 45 - 6789``,
    ``123--45--6789``, ``123 - 45-6789``: ``_chain_dashed``)."""
    prev = _at(text, i - 1)
    if prev in _ALNUM:
        return []
    if prev in "-./:" and _at(text, i - 2) in _DIGITS:
        return []
    code, cc = _country_code_at(text, i)
    if code >= 0 and text[code] == "(":
        found = _e164_grouped(text, i, code, cc, veto)
        if found:
            return found
    if code >= 0:
        found = _e164_dotmix(text, i, code, cc, veto)
        if found:
            return found
    found = _chain_same(text, i, veto)
    if found:
        return found
    if prev == "+" and _plus_free(text, i - 2):
        found = _e164_grouped(text, i, i - 1, 0, veto) or _e164_paren(text, i, veto)
        if found:
            return found
    if text[i] == "0" and _at(text, i + 1) in ("0", "1"):
        found = _intl00(text, i, veto)
        if found:
            return found
    return _chain_mixed(text, i, veto) or _chain_dashed(text, i, code)


# Country calling codes ITU-T has assigned (E.164; 1 and 7 shared by several countries). A number
# written with "00" for the "+" (0049 30 1234567), or glued to its "+" by a "." (+44.20.7946.0958),
# is read only with one of these: "0012 3456 7890" is a zero-padded number, "+12.34.56.78" a
# signed one.
_CC_ASSIGNED = frozenset(
    "1 7 20 27 30 31 32 33 34 36 39 40 41 43 44 45 46 47 48 49 51 52 53 54 55 56 57 58 60 61 62"
    " 63 64 65 66 81 82 84 86 90 91 92 93 94 95 98 211 212 213 216 218 220 221 222 223 224 225"
    " 226 227 228 229 230 231 232 233 234 235 236 237 238 239 240 241 242 243 244 245 246 247 248"
    " 249 250 251 252 253 254 255 256 257 258 260 261 262 263 264 265 266 267 268 269 290 291 297"
    " 298 299 350 351 352 353 354 355 356 357 358 359 370 371 372 373 374 375 376 377 378 379 380"
    " 381 382 383 385 386 387 389 420 421 423 500 501 502 503 504 505 506 507 508 509 590 591 592"
    " 593 594 595 596 597 598 599 670 672 673 674 675 676 677 678 679 680 681 682 683 685 686 687"
    " 688 689 690 691 692 800 808 850 852 853 855 856 870 878 880 881 882 883 886 888 960 961 962"
    " 963 964 965 966 967 968 970 971 972 973 974 975 976 977 979 992 993 994 995 996 998".split()
)


def _intl00(text: str, i: int, veto: bool) -> list[tuple[int, int, str, str]]:
    # An exit code for the "+" of an E.164 number: "00" glued to an assigned country code
    # (_CC_ASSIGNED: "0049 30 1234567", "0044 (0)20 7946 0958"), or "00" or the North American
    # "011" apart from it by a space or hyphen ("00 44 20 7946 0958", "011 44 20 7946 0958"); then
    # a space or hyphen and the rest as _e164_grouped reads it (its first digit not 0 but after
    # Italy's 39, which keeps its 0; 10-15 digits with the code's, 11 after the code 1, NANP's
    # length: "0044 822463" is short), or the rest with an area code or trunk prefix in
    # parentheses (_paren_rest); not after a digit and a space (a table's digit groups: "1.999 007
    # 501 2699"). With the exit code apart, the rest read by _e164_grouped is not all of 2-digit
    # groups (hex bytes: "00 44 20 79 46 09 58") and after the code 1 starts 2-9, as NANP area
    # codes do (binary: "011 1 101 110 0111"). The exit code glued to the country code is read for
    # "00" only: "01144" is a ZIP code of Massachusetts.
    if _at(text, i - 1) == " " and _at(text, i - 2) in _DIGITS:
        return []
    k = _run_end(text, i, _DIGITS, 6)
    apart = text[i:k] in ("00", "011")
    if apart:
        if not (_at(text, k) in " -" and _at(text, k + 1) in _DIGITS):
            return []
        c = k + 1
        k = _run_end(text, c, _DIGITS, 4)
    elif text[i + 1] == "0":
        c = i + 2
    else:
        return []
    cc = text[c:k]
    if not 1 <= k - c <= 3 or cc not in _CC_ASSIGNED:
        return []
    if _at(text, k) in " -" and _at(text, k + 1) in _DIGITS:
        if text[k + 1] == "0" and cc != "39":
            return []
        if apart and cc == "1" and text[k + 1] < "2":
            return []
        found = _e164_grouped(text, k + 1, i, len(cc), veto)
        if not found:
            return []
        rest = text[k + 1:found[0][1]]
        if apart and all(len(g) == 2 for g in rest.replace("-", " ").split(" ")):
            return []
        nd = len(cc) + sum(c in _DIGITS for c in rest)
        return found if nd == 11 or (cc != "1" and 10 <= nd <= 15) else []
    return _paren_rest(text, k, i, len(cc), veto)


def _take_groups(text: str, i: int, allowed: str) -> tuple[list[int], list[str], int, bool]:
    """The digit groups of the number run from ``i``, joined by single separators of ``allowed``
    each followed by a digit (the C kernel's take_groups): their lengths, the separators, where
    the last group ends, and whether the run goes on past _MAX_GROUPS groups."""
    n = len(text)
    groups: list[int] = []
    seps: list[str] = []
    j = i
    while True:
        k = _run_end(text, j, _DIGITS, n)
        groups.append(k - j)
        j = k
        if not (j + 1 < n and text[j] in allowed and text[j + 1] in _DIGITS):
            return groups, seps, j, False
        if len(groups) == _MAX_GROUPS:
            return groups, seps, j, True
        seps.append(text[j])
        j += 1


def _e164_ends(text: str, i: int, groups: list[int], g: int, end: int, total: int, check_list: bool) -> bool:
    """Whether the first ``g`` groups of the number run from ``i``, ending at ``end`` with
    ``total`` digits counting the country code's, make a whole E.164 number (the C kernel's
    e164_ends): 8-15 digits, not run on by a letter or digit or by "-./:" before a digit, and
    (``check_list``) not cutting a later number's finding where the run lists several."""
    if not 8 <= total <= 15:
        return False
    after = _at(text, end)
    if after in _ALNUM or (after in "-./:" and _at(text, end + 1) in _DIGITS):
        return False
    return not (check_list and _cuts_later(text, i, groups, g, end))


def _e164_dotmix(text: str, i: int, code: int, cc: int, veto: bool) -> list[tuple[int, int, str, str]]:
    # A phone number after a country code (_country_code_at; code is where it starts, cc its digit
    # count) whose groups from i are joined by single dots, spaces and hyphens, one dot and another
    # separator among them ("+1 415.555-0123", "+44 20.7946 0958"): its longest leading groups
    # with 8-15 digits with the code's, every group after the first 2+ digits long, not all of 3
    # digits (thousands), that end a number; the list rule's veto as in
    # _e164_grouped. A second dot makes it numbers: "+1 12.50-13.75", "+1 12.50 13.75 14.25" are a
    # sign and decimals, "+1 192.168.10-20" an address (one dot is no IPv4 address).
    groups, seps, j, more = _take_groups(text, i, " -.")
    ng = len(groups)
    for g in range(ng, 1, -1):
        end = i + sum(groups[:g]) + g - 1
        used = seps[:g - 1]
        if used.count(".") != 1 or all(c == "." for c in used) or min(groups[1:g]) < 2:
            continue
        if all(x == 3 for x in groups[:g]):
            continue
        if not _e164_ends(text, i, groups, g, end, sum(groups[:g]) + cc, veto):
            continue
        return [(code, end, "PHONE", "e164")]
    return []


# Words a "+" may be glued to and still start a phone number ("tel+44 20 7946 0958"); any other
# letter or digit before the "+" makes it no phone number's ("x+1 234-56-7890" keeps its SSN).
_PHONE_WORDS = frozenset({"tel", "phone", "ph", "mobile", "mob", "cell", "fax"})


def _plus_free(text: str, j: int) -> bool:
    """Whether the character at ``j``, before a ``+`` (or the ``(`` of ``(+CC)``), lets a phone
    number start after it: no letter or digit, or the end of a word of :data:`_PHONE_WORDS` (any
    case) that no letter or digit comes before."""
    if _at(text, j) not in _ALNUM:
        return True
    a = j
    while a >= 0 and text[a] in _LETTERS and j - a < 7:
        a -= 1
    if a >= 0 and text[a] in _ALNUM:
        return False
    return _lower(text[a + 1:j + 1]) in _PHONE_WORDS


def _country_code_at(text: str, i: int) -> tuple[int, int]:
    """Where the country code before the number at ``i`` starts, and its digit count: ``+CC ``
    (its ``+``) or ``(+CC)`` with one optional space after it (its ``(``), CC being 1-3 digits,
    the first not 0, not glued to a letter or digit before it but a phone word's
    (:func:`_plus_free`); ``(-1, 0)`` when there is none. A
    number after a country code is a phone number's rest, whatever its grouping
    (``+1 234-56-7890``, ``+1 234.56.7890``)."""
    j = i - 1
    if _at(text, j) == " ":
        j -= 1
    paren = _at(text, j) == ")"
    if paren:
        j -= 1
    elif j == i - 1:
        return -1, 0
    last = j
    while last - j < 4 and _at(text, j) in _DIGITS:
        j -= 1
    n = last - j
    if not 1 <= n <= 3 or _at(text, j + 1) == "0" or _at(text, j) != "+":
        return -1, 0
    j -= 1
    if paren:
        if _at(text, j) != "(":
            return -1, 0
        j -= 1
    if not _plus_free(text, j):
        return -1, 0
    return j + 1, n


def _dotted_phone(text: str, i: int, groups: list[int], nd: int) -> int:
    """Where the phone number starts whose rest, after a country code (``_country_code_at``), is
    the dotted ``groups`` from ``i`` (``+1 234.567.8901``, ``+33 6.12.34.56.78``): 8-15 digits with
    the country code's, every group after the first at least 2 digits long (versions have short
    ones: ``+1 10.0.19041.1``), not four groups of 1-3 digits (an IPv4 address); -1 when it is
    none."""
    if len(groups) < 2 or (len(groups) == 4 and max(groups) <= 3) or min(groups[1:]) < 2:
        return -1
    code, cc = _country_code_at(text, i)
    return code if code >= 0 and 8 <= nd + cc <= 15 else -1


def _iso_date(v: str) -> bool:
    """``v`` is ``YYYY-MM-DD``: a year 1900-2099, a month 01-12 and a day 01-31."""
    return v[:2] in ("19", "20") and 1 <= int(v[5:7]) <= 12 and 1 <= int(v[8:10]) <= 31


def _dash_sep(text: str, j: int) -> int:
    """The width of the dash separator at ``j`` that a digit follows: ``-``, ``--``, `` - `` or
    `` -- `` (in the folded view en and em dashes are ``-`` too); 0 when there is none."""
    if _at(text, j) == "-":
        w = 2 if _at(text, j + 1) == "-" else 1
    elif text[j:j + 3] == " - ":
        w = 3
    elif text[j:j + 4] == " -- ":
        w = 4
    else:
        return 0
    return w if _at(text, j + w) in _DIGITS else 0


def _e164_grouped(text: str, i: int, start: int, cc: int, veto: bool) -> list[tuple[int, int, str, str]]:
    # An E.164 number whose digits run from i in groups joined by single spaces and hyphens, mixed
    # or not ("+1 234-56-7890"), or follow a parenthesised country code of cc digits
    # ("(+1) 234-56-7890"); the finding starts at start. Its longest leading groups with 8-15
    # digits in all (the country code's included) that end a number; the list rule's veto applies
    # (see _chain_same), to the whole run too: its last group may start a number read across
    # dashes ("+44 20 7946 123--45--6789").
    groups, seps, j, more = _take_groups(text, i, " -")
    if not cc and text[i] == "0":
        return []
    ng = len(groups)
    # "+1 2023-10-15", "(+2) 2023-10-15 12": a count or an offset, then an ISO date
    date = ng
    pos = i
    for k in range(ng - 2):
        if groups[k:k + 3] == [4, 2, 2] and seps[k:k + 2] == ["-", "-"] and _iso_date(text[pos:pos + 10]):
            date = k
            break
        pos += groups[k] + 1
    for g in range(ng, 0, -1):
        end = i + sum(groups[:g]) + g - 1
        if g > date + 2:
            continue
        if not _e164_ends(text, i, groups, g, end, sum(groups[:g]) + cc, veto):
            continue
        return [(start, end, "PHONE", "e164")]
    return []


def _chain_dashed(text: str, i: int, code: int) -> list[tuple[int, int, str, str]]:
    # Groups joined by dashes, "-", "--", " - " or " -- " (a hyphen, or in the folded view an en
    # or em dash, alone or doubled, with a space on each side), in any mix ("123 - 45 - 6789",
    # "123--45--6789", "123 -- 45 -- 6789", "123 - 45-6789"), read as an SSN (3-2-4, SSA rules; after a country code starting at
    # code >= 0, the phone number it ends) or a card (its groupings, IIN, Luhn) only; not where
    # such a dash and a digit come before it (a longer run of numbers, a sum, a range) or after it.
    if _at(text, i - 3) in _DIGITS and _dash_sep(text, i - 2) == 2:
        return []
    if _at(text, i - 4) in _DIGITS and _dash_sep(text, i - 3) == 3:
        return []
    if _at(text, i - 5) in _DIGITS and _dash_sep(text, i - 4) == 4:
        return []
    n = len(text)
    groups: list[int] = []
    digits: list[str] = []
    widths: list[int] = []
    j = i
    while True:
        k = j
        while k < n and text[k] in _DIGITS:
            k += 1
        groups.append(k - j)
        digits.append(text[j:k])
        j = k
        w = _dash_sep(text, j)
        if not w and text[j:j + 1] == " " and _at(text, j + 1) in _DIGITS:
            w = -1  # a single space: only among "--" or " - " ("123 - 45 6789")
        if not w:
            break
        if len(groups) == _MAX_GROUPS:
            return []
        widths.append(w)
        j += abs(w)
    if len(groups) < 2 or (-1 in widths and max(widths) < 2):
        return []
    after = _at(text, j)
    if after in _ALNUM or (after in "-./:" and _at(text, j + 1) in _DIGITS):
        return []
    d = "".join(digits)
    if groups == [3, 2, 4]:
        if not _ssa_valid(d):
            return []
        return [(code, j, "PHONE", "e164")] if code >= 0 else [(i, j, "SSN", "ssa-rules")]
    if 13 <= len(d) <= 19 and _card_groups_ok(groups, "-") and _iin_known(d) and _luhn(d):
        return [(i, j, "CREDIT_CARD", "luhn")]
    return []


def _e164_paren(text: str, i: int, veto: bool) -> list[tuple[int, int, str, str]]:
    # A phone number written "+CC (area) rest" or with the trunk prefix in parentheses,
    # "+CC (0)rest" ("+1 (234) 567-8901", "+44 (0)20 7946 0958"), the country code in parentheses
    # too or not ("(+44) (0)20 7946 0958"), i the country code's first digit after its "+": CC 1-3
    # digits, the first not 0, then the rest as _paren_rest reads it.
    n = len(text)
    k = i
    while k < n and text[k] in _DIGITS and k - i < 4:
        k += 1
    cc = k - i
    if cc > 3 or text[i] == "0":
        return []
    start = i - 1
    if _at(text, i - 2) == "(" and _at(text, k) == ")":
        start, k = i - 2, k + 1
    return _paren_rest(text, k, start, cc, veto)


def _paren_rest(text: str, k: int, start: int, cc: int, veto: bool) -> list[tuple[int, int, str, str]]:
    # After a country code of cc digits ending at k (the finding starts at start): an optional
    # space, 1-4 digits in parentheses (a lone 0 is the trunk prefix, not dialled from abroad, and
    # not counted), an optional space or hyphen, then the rest as _e164_grouped reads it, or
    # dotted ("+1 (234) 567.8901": 2+ groups of 2+ digits, not four groups of 1-3 digits, 8-15
    # digits with the codes', nothing dotted or a digit after it).
    n = len(text)
    if _at(text, k) == " ":
        k += 1
    if _at(text, k) != "(":
        return []
    k += 1
    a = k
    while k < n and text[k] in _DIGITS and k - a < 5:
        k += 1
    area = k - a
    if not 1 <= area <= 4 or _at(text, k) != ")":
        return []
    if text[a:k] == "0":
        area = 0
    k += 1
    if _at(text, k) in (" ", "-") and _at(text, k + 1) in _DIGITS:
        k += 1
    if _at(text, k) not in _DIGITS:
        return []
    e = _run_end(text, k, _DIGITS, n)
    if _at(text, e) == "." and _at(text, e + 1) in _DIGITS:
        groups = [e - k]
        while _at(text, e) == "." and _at(text, e + 1) in _DIGITS and len(groups) < _MAX_GROUPS:
            f = _run_end(text, e + 1, _DIGITS, n)
            groups.append(f - e - 1)
            e = f
        after = _at(text, e)
        if (min(groups) < 2 or (len(groups) == 4 and max(groups) <= 3) or not 8 <= sum(groups) + cc + area <= 15
                or after in _ALNUM or (after in "-./:" and _at(text, e + 1) in _DIGITS)):
            return []
        return [(start, e, "PHONE", "e164")]
    return _e164_grouped(text, k, start, cc + area, veto)


def _chain_same(text: str, i: int, veto: bool) -> list[tuple[int, int, str, str]]:
    n = len(text)
    groups: list[int] = []
    digits = []
    sep = ""
    j = i
    whole = True  # False when the chain runs on past _MAX_GROUPS groups
    while True:
        k = j
        while k < n and text[k] in _DIGITS:
            k += 1
        groups.append(k - j)
        digits.append(text[j:k])
        j = k
        if len(groups) == _MAX_GROUPS:
            whole = not (j + 1 < n and text[j] == sep and text[j + 1] in _DIGITS)
            break
        if j + 1 < n and text[j] in _CHAIN_SEPS and text[j + 1] in _DIGITS and (not sep or text[j] == sep):
            sep = text[j]
            j += 1
            continue
        break
    if whole:
        found = _chain_match(text, i, groups, digits, sep, j)
        # The veto holds for the whole run too: its last group may start a number read across
        # dashes, "+44 20 7946 123--45--6789", whose finding it would cut.
        if found and veto and _cuts_later(text, i, groups, len(groups), j):
            found = []
        if found or sep != " ":
            return found
    elif sep != " ":
        return []
    # A list of numbers separated by spaces ("4111111111111111 4012888888881881") chains into one
    # run that matches nothing: its longest leading groups that do match are the finding.
    for g in range(len(groups) - 1 if whole else len(groups), 0, -1):
        end = i + sum(groups[:g]) + g - 1
        found = _chain_match(text, i, groups[:g], digits[:g], sep if g > 1 else "", end)
        if found and found[0][2] == "SSN" and not _ssn_context(text, i):
            continue  # "sizes 512 64 1024 2048": a list of numbers has 3-2-4 windows everywhere
        if found and not (veto and _cuts_later(text, i, groups, g, end)):
            return found
    return []


def _chain_mixed(text: str, i: int, veto: bool) -> list[tuple[int, int, str, str]]:
    # Groups joined by single spaces and hyphens, both used, read as an SSN, a card or a NANP phone
    # number ("123-45 6789", "4111-1111 1111-1111", "1-800 555-0199"; a NANP number with a space
    # before its last group only where that group is no year 1800-2099: "259-264 1970" is pages
    # and a year); E.164 numbers are _e164_grouped's.
    n = len(text)
    groups: list[int] = []
    seps: list[str] = []
    j = i
    while True:
        k = j
        while k < n and text[k] in _DIGITS:
            k += 1
        groups.append(k - j)
        j = k
        if len(groups) == _MAX_GROUPS or not (j + 1 < n and text[j] in " -" and text[j + 1] in _DIGITS):
            break
        seps.append(text[j])
        j += 1
    if len(set(seps)) < 2:
        return []
    # The longest leading groups that read as a card or an SSN, with both separators among them.
    # Where more numbers follow (only after a space: "-" and a digit end nothing), the rules of a
    # list of numbers apply (see _chain_same): an SSN needs its context, and a prefix must not
    # cut a later number's own finding.
    for g in range(min(len(groups), 5), 1, -1):
        if len(set(seps[: g - 1])) < 2:
            continue
        end = i + sum(groups[:g]) + g - 1
        after = _at(text, end)
        if after in _ALNUM or (after in "-./:" and _at(text, end + 1) in _DIGITS):
            continue
        d = text[i:end].replace(" ", "").replace("-", "")
        if groups[:g] == [3, 2, 4]:
            if not _ssa_valid(d) or (g < len(groups) and not _ssn_context(text, i)):
                continue
            found = [(i, end, "SSN", "ssa-rules")]
        elif 13 <= len(d) <= 19 and _card_groups_ok(groups[:g], " ") and _iin_known(d) and _luhn(d):
            found = [(i, end, "CREDIT_CARD", "luhn")]
        elif (seps[g - 2] == "-" or not 1800 <= int(d[-4:]) <= 2099) and (  # "259-264 1970": pages, a year
                (groups[:g] == [3, 3, 4] and d[0] in "23456789")
                or (groups[:g] == [1, 3, 3, 4] and d[0] == "1" and d[1] in "23456789")):
            found = [(i, end, "PHONE", "nanp")]
        else:
            continue
        if not (veto and g < len(groups) and _cuts_later(text, i, groups, g, end)):
            return found
    return []


def _card_floor(text: str, i: int) -> list[tuple[int, int]]:
    """The longest card read from the digit group at ``i`` whatever number is glued to it before
    or after (``555 123-4111 1111 1111 1111``, ``555.123.4111 1111 1111 1111``,
    ``4111-1111-1111-1111-2``): 13-19 digits in a card's groups (:func:`_card_groups_ok`), a known
    IIN and Luhn, the groups joined by single spaces, dashes (``-``, ``--``, `` - ``, `` -- ``) in
    any mix, or dots alone; not glued to a letter, and in one group not glued to a "." that a
    digit is on the other side of (a decimal: ``0.4111111111111111``; a ":" or "/" is none, as a
    time, a ratio or a date has no 13-19 digit part, so ``12:4111111111111111`` is a card).
    ``[(i, end)]`` or ``[]``. The number readers above leave such a card unread or cut (no number
    is read after a dash and a digit, and none ends before one); :func:`_cover_cards` covers it."""
    prev = _at(text, i - 1)
    if prev in _LETTERS:
        return []
    # a decimal before the card: only a card of several groups
    point = prev == "." and _at(text, i - 2) in _DIGITS and not (
        prev == "." and (_dot_run(text, i - 2, -1) or _phone_head(text, i - 2)))
    groups: list[int] = []
    d = ""
    dotted = None
    best = -1
    j = i
    while True:
        k = _run_end(text, j, _DIGITS, 20)
        groups.append(k - j)
        d += text[j:k]
        j = k
        if len(d) > 19:
            break
        if len(d) >= 13 and _card_groups_ok(groups, " ") and _iin_known(d) and _luhn(d):
            after = _at(text, j)
            if after not in _ALNUM and not (len(groups) == 1 and (point or (
                    after == "." and _at(text, j + 1) in _DIGITS and not _dot_run(text, j + 1, 1)))):
                best = j
        if len(groups) == 5:
            break
        dot = _at(text, j) == "." and _at(text, j + 1) in _DIGITS
        if dot:
            w = 1
        else:
            w = _dash_sep(text, j) or (_at(text, j) == " " and _at(text, j + 1) in _DIGITS)
        if not w or dotted not in (None, dot):
            break
        dotted = dot
        j += w
    return [(i, best)] if best >= 0 else []


def _dot_run(text: str, k: int, step: int) -> bool:
    # Whether the digit group through k (its last digit for step -1, its first for +1) is glued
    # to another by a dot on the side away from the card: "555.123.4111111111111111" is no
    # decimal, as a decimal has one dot ("0.4111111111111111" stays unread).
    while _at(text, k + step) in _DIGITS:
        k += step
    return _at(text, k + step) == "." and _at(text, k + 2 * step) in _DIGITS


def _phone_head(text: str, k: int) -> bool:
    # Whether the digit group ending at k is 3 digits joined by a space, a dot or a dash separator
    # (or by nothing, after an area code) to a whole 3-digit group or a "(555)" area code before it:
    # "555 123.4111111111111111" is a phone number glued to a card by a dot, no decimal. A group
    # glued to a letter, or after a decimal or a thousands separator ("0.555 123.4...", "1,555
    # 123.4..."), leaves the dot a decimal point.
    a = k - 2
    if _at(text, a) not in _DIGITS or _at(text, a + 1) not in _DIGITS or _at(text, a - 1) in _DIGITS:
        return False
    p = a - _glue_before(text, a) - 1  # the last character before the glue
    if _at(text, p) == ")":
        return _at(text, p - 4) == "(" and all(_at(text, q) in _DIGITS for q in range(p - 3, p))
    if not all(_at(text, q) in _DIGITS for q in range(p - 2, p + 1)):
        return False
    c = _at(text, p - 3)
    return c not in _ALNUM and not (c in ".,:/" and _at(text, p - 4) in _DIGITS)


def _code_only(text: str, a: int, s: int) -> bool:
    # Whether the digits from a to s are a country code alone (1-3 digits, after a "00" or "011"
    # exit code): a phone number read across a card's first groups ("555 123-4111 1111 1111 1111")
    # keeps its reading.
    d = "".join(c for c in text[a:s] if c in _DIGITS)
    d = d[3:] if d.startswith("011") else d[2:] if d.startswith("00") else d
    return 1 <= len(d) <= 3


def _cover_cards(text: str, taken: list[tuple[int, int, str, str]],
                 floors: list[tuple[int, int]]) -> list[tuple[int, int, str, str]]:
    """The findings ``taken`` (disjoint, sorted by start) and a CREDIT_CARD finding for each
    stretch of a card of ``floors`` (:func:`_card_floor`; sorted by start) that they leave
    uncovered, from its first digit to its last: no digit of such a card stays in the clear, and
    no finding is changed ("555 123-4111 1111 1111 1111" is ``[PHONE] [CREDIT_CARD]``: the phone
    number read across the card's first group, the card's rest) but a CREDIT_CARD finding that
    such a stretch runs into, which starts at the stretch instead (one placeholder), and a PHONE
    finding that reads a card after its country code (:func:`_code_only`), which becomes a card
    finding from the card's first digit (or the groups glued to it) and runs on over the card."""
    if not floors:
        return taken
    starts = [c[0] for c in taken]
    # The stretches, in start order: a card's uncovered digits lie past every digit of the cards
    # before it, all covered by then. Kept apart from taken, so none is inserted into the middle
    # of a long list (a text of glued cards before thousands of findings).
    added: list[tuple[int, int, str, str]] = []
    for s, e in floors:
        k = bisect_left(starts, s)
        grown = -1
        if k and taken[k - 1][2] == "PHONE" and taken[k - 1][1] > s and _code_only(text, taken[k - 1][0], s):
            # A card read inside a phone finding after its country code ("+1 4111 1111 1149 9": E.164
            # reads 8-15 digits) is a card: from its first digit, or the groups glued to it, on; a gap
            # after it in the card extends it (one placeholder).
            grown = k - 1
            taken[grown] = (_glued_start(text, s, taken[grown][0]), taken[grown][1], "CREDIT_CARD", "luhn")
            starts[grown] = taken[grown][0]
        limit = max(taken[k - 1][1] if k else 0, added[-1][1] if added else 0)
        glued = _glued_start(text, s, limit) if limit <= s else s
        if glued < s and k < len(taken) and taken[k][0] == s and taken[k][2] == "CREDIT_CARD":
            # The card is a card finding already: it starts where the groups glued to it do.
            taken[k] = (glued, *taken[k][1:])
            starts[k] = glued
            glued = s
        elif glued < s and k < len(taken) and taken[k][0] == s:
            # The card is a finding of another type: the groups glued to it are a stretch of their own.
            end = s
            while text[end - 1] not in _DIGITS:
                end -= 1
            added.append((glued, end, "CREDIT_CARD", "luhn"))
            glued = s
        if k and taken[k - 1][1] > s:
            k -= 1
        m = len(added)
        while m and added[m - 1][1] > s:
            m -= 1
        near = []  # (start, end, index in taken or -1)
        while k < len(taken) and taken[k][0] < e:
            near.append((taken[k][0], taken[k][1], k))
            k += 1
        near += [(c[0], c[1], -1) for c in added[m:] if c[0] < e]
        gaps = []
        pos = s
        for c in sorted(near):
            if c[0] > pos:
                gaps.append((pos, c[0], c[2]))
            pos = max(pos, c[1])
        if pos < e:
            gaps.append((pos, e, -1))
        for a, b, t in gaps:
            a0 = a
            while text[a] not in _DIGITS:
                a += 1
            while text[b - 1] not in _DIGITS:
                b -= 1
            if a < b and grown >= 0 and taken[grown][1] == a0:
                taken[grown] = (taken[grown][0], b, "CREDIT_CARD", "luhn")
            elif a < b and added and added[-1][1] == a0 > s:
                # The stretch goes on one this card already reaches into: one placeholder.
                added[-1] = (added[-1][0], b, "CREDIT_CARD", "luhn")
            elif a < b and t >= 0 and taken[t][2] == "CREDIT_CARD":
                # The stretch runs into a card finding: that finding starts where the stretch does
                # ("123 - 45 - 6789 - 4111 1111 1111 1111" is one placeholder).
                taken[t] = (glued if a == s else a, *taken[t][1:])
                starts[t] = taken[t][0]
            elif a < b:
                added.append((glued if a == s else a, b, "CREDIT_CARD", "luhn"))
    return _glued_after(text, sorted(taken + added))


def _glued_after(text: str, found: list[tuple[int, int, str, str]]) -> list[tuple[int, int, str, str]]:
    """``found`` with each CREDIT_CARD finding run on over the digit groups glued after it by a
    dot or a dash separator (:func:`_dash_sep`), up to a group that the next finding starts or
    covers or that a letter is glued after: the readers refuse a number that follows a card by a
    dash or a dot, so "4111 1111 1111 1111-555-123-4567" would keep a phone number in the clear.
    The first group may follow by a single space when a dash separator glues the next group to it
    ("4111 1111 1111 1111 555-1234"), or when it is 3 digits a dot joins to 4 ("555.1234"); a dotted tail that is an IPv4 address and ends the run
    (:func:`_ipv4_tail`) is left out ("4111 1111 1111 1111.10.0.0.1")."""
    for x, (a, end, label, how) in enumerate(found):
        if label != "CREDIT_CARD":
            continue
        limit = found[x + 1][0] if x + 1 < len(found) else len(text)
        b = end
        if _ipv4_tail(text, b):
            continue
        if _at(text, b) == " " and _at(text, b + 1) in _DIGITS:
            # A single space, then a number a dash glues on ("4111 1111 1111 1111 555-1234"): no
            # reader reads a 7-digit local number; a lone group (" 2024", " 12 items") stays apart.
            k = _run_end(text, b + 1, _DIGITS, len(text))
            w = _dash_sep(text, k)
            if not w and k - b == 4 and _at(text, k) == "." and _run_end(text, k + 1, _DIGITS, 5) == k + 5:
                w = 1  # a phone number's "555.1234"; a decimal of another shape ("2.5", "12.99") stays apart
            k2 = _run_end(text, k + w, _DIGITS, len(text))
            if w and k <= limit and (k2 > limit or _at(text, k2) not in _LETTERS):
                b = k  # the loop takes the groups after it, up to the next finding
        while True:
            w = _dash_sep(text, b) or (_at(text, b) == "." and _at(text, b + 1) in _DIGITS)
            k = _run_end(text, b + w, _DIGITS, len(text))
            if not w or k > limit or _at(text, k) in _LETTERS:
                break
            b = k
        found[x] = (a, b, label, how)
    return found


def _ipv4_tail(text: str, b: int) -> bool:
    # Whether ".a.b.c.d" at b is an IPv4 address (each part 0-255, no leading zero) that nothing
    # glues on to: no digit of a card or a phone number is left out with it (the readers take no
    # 4-part dotted number of 1-3 digit parts for a phone number either).
    for _ in range(4):
        k = _run_end(text, b + 1, _DIGITS, 4)
        if _at(text, b) != "." or not 1 <= k - b - 1 <= 3 or (k - b > 2 and text[b + 1] == "0") \
                or int(text[b + 1:k]) > 255:
            return False
        b = k
    return _at(text, b) not in _LETTERS and not _dash_sep(text, b) and not (
        _at(text, b) == "." and _at(text, b + 1) in _DIGITS)


def _ipv4_head(text: str, b: int) -> bool:
    # Whether "a.b.c.d." ending at the dot b is an IPv4 address (each part 0-255, no leading zero)
    # that nothing glues on to before it; the mirror of _ipv4_tail.
    for _ in range(4):
        k = b
        while k > b - 4 and _at(text, k - 1) in _DIGITS:
            k -= 1
        if _at(text, b) != "." or not 1 <= b - k <= 3 or (b - k > 1 and text[k] == "0") or int(text[k:b]) > 255:
            return False
        b = k - 1
    return _at(text, b) not in _LETTERS and not (_at(text, b) == "." and _at(text, b - 1) in _DIGITS) and not any(
        b + 1 - w >= 0 and _dash_sep(text, b + 1 - w) == w for w in (1, 2, 3, 4))


def _glued_start(text: str, a: int, limit: int) -> int:
    """Where the stretch of a card from the digit ``a`` starts once the uncovered digit groups glued
    before it (from ``limit`` on) are taken in: none when the card is joined to them by a space
    and not followed by a dash, else each group joined to the next by a single space, a dot or a
    dash separator (:func:`_dash_sep`), or a parenthesised area code (``(555)`` joined to the group
    by nothing or by such a glue: ``(555) ``, ``(555)-``) before the group, back to a group with a
    letter glued before it (left out) or an area code with one (taken in: ``x(555) 123-...``). The readers
    refuse every number there, as none ends before a dash and a digit, so an SSN or a phone
    number glued to the card would keep its first groups in the clear ("123-45-6789-4111 1111
    1111 1111", "555 123-4111-1111-1111-1111", "(555) 123-4111-1111-1111-1111",
    "555.123.4111.1111.1111.1111")."""
    sep = _glue_before(text, a)
    if sep == 1 and text[a - 1] == " " and not _dash_sep(text, _run_end(text, a, _DIGITS, 20)):
        return a
    if _ipv4_head(text, a - 1):
        return a  # "10.0.0.1.4111111111111111", as the tail after a card (_ipv4_tail)
    glue = a  # where the glue before the stretch ends: its first digit, or an area code's "("
    while True:
        g = glue - sep - 1
        if sep and g >= limit and _at(text, g) in _DIGITS:
            while g > limit and _at(text, g - 1) in _DIGITS:
                g -= 1
            glue = g
        else:
            g = glue - 4 - sep
            if not (g >= limit and _at(text, g - 1) == "(" and _at(text, g + 3) == ")"
                    and all(_at(text, q) in _DIGITS for q in range(g, g + 3))):
                return a
            glue = g - 1
            if _at(text, glue - 1) in _LETTERS:
                return g  # the "(" parts the area code from the word: "x(555) 123-4111 ..."
        if _at(text, glue - 1) in _LETTERS:
            return a
        a = g
        sep = _glue_before(text, glue)


def _glue_before(text: str, a: int) -> int:
    # The width of the single space, dot or dash separator that ends at a, or 0.
    for w in (4, 3, 2, 1):
        if a - w >= 0 and (w == 1 and text[a - 1] in " ." or _dash_sep(text, a - w) == w):
            return w
    return 0


def _cuts_later(text: str, i: int, groups: list[int], g: int, end: int) -> bool:
    # Whether a later number of the first g groups starts a finding of its own that runs past end:
    # the prefix would take part of it and leave the rest in the clear ("4000 1005 1111 123 45
    # 6789" is a Luhn-valid 15-digit "card" ending inside the SSN 123 45 6789).
    pos = i
    for q in range(1, g):
        pos += groups[q - 1] + 1
        if any(e > end for _, e, _, _ in _chain(text, pos, veto=False)):
            return True
    return False


def _chain_match(text: str, i: int, groups: list[int], digits: list[str], sep: str,
                 end: int) -> list[tuple[int, int, str, str]]:
    prev = _at(text, i - 1)
    after = _at(text, end)
    if after in _ALNUM:
        return []
    if after in "-./:" and _at(text, end + 1) in _DIGITS:
        return []
    d = "".join(digits)
    nd = len(d)
    # E.164: "+" then 8-15 digits, first digit not 0.
    if prev == "+":
        free = _plus_free(text, i - 2)
        if free and sep in ("", " ", "-") and 8 <= nd <= 15 and d[0] != "0":
            return [(i - 1, end, "PHONE", "e164")]
        if free and sep == "." and _plus_dotted(groups, d):
            return [(i - 1, end, "PHONE", "e164")]
        # Not a phone number from its "+" (glued to a word not a phone word, or not E.164's shape): the number is
        # read as if the "+" were not there, so "ssn+123-45-6789" still holds an SSN.
    dotted = _dotted_phone(text, i, groups, nd) if sep == "." else -1
    if dotted >= 0:
        return [(dotted, end, "PHONE", "e164")]
    if groups == [3, 2, 4] and sep in (" ", "-", "."):
        # after a country code: " " and "-" are _e164_grouped's (from the "+", or the "(" in
        # _chain), "." _dotted_phone's
        return [(i, end, "SSN", "ssa-rules")] if _ssa_valid(d) else []
    if groups == [9] and _ssn_context(text, i):
        return [(i, end, "SSN", "ssa-rules")] if _ssa_valid(d) else []
    if 13 <= nd <= 19 and _card_groups_ok(groups, sep) and _iin_known(d) and _luhn(d):
        return [(i, end, "CREDIT_CARD", "luhn")]
    if sep in ("-", ".", " "):
        if groups == [3, 3, 4] and d[0] in "23456789":
            return [(i, end, "PHONE", "nanp")]
        if groups == [1, 3, 3, 4] and d[0] == "1" and d[1] in "23456789":
            return [(i, end, "PHONE", "nanp")]
    if groups == [1, 3, 2, 4] and sep == "-" and d[0] == "1" and d[1] in "23456789":
        # "1-234-56-7890": the trunk or country code 1, then a 3-2-4 (as "+1 234-56-7890")
        return [(i, end, "PHONE", "e164")]
    if (groups == [3, 4] and sep in ("-", ".")) or (groups == [2, 4] and sep == "-"):
        p = _paren_area(text, i)
        if p < 0:
            return []
        area = text[p + 1:p + 4]
        if groups == [2, 4]:  # "(123)-45-6789", "+(123) 45-6789": an SSN's area in parentheses
            return [(p, end, "SSN", "ssa-rules")] if _ssa_valid(area + d) else []
        if area[0] in "23456789":
            return [(_trunk_one(text, p), end, "PHONE", "nanp")]
    return []


def _paren_area(text: str, i: int) -> int:
    """Where "(DDD)" starts that the number at ``i`` follows, directly or after one space or
    hyphen, with no letter or digit before it but a trunk 1 (:func:`_trunk_one`); -1 if none."""
    p = i - 5 - (_at(text, i - 1) in (" ", "-"))
    if not (p >= 0 and text[p] == "(" and text[p + 4] == ")" and all(c in _DIGITS for c in text[p + 1:p + 4])):
        return -1
    return p if _at(text, p - 1) not in _ALNUM or _trunk_one(text, p) < p else -1


def _trunk_one(text: str, p: int) -> int:
    """Where a NANP number whose area code in parentheses starts at ``p`` starts: at the trunk 1
    before it (``1 (234) 567-8901``, ``1-(234)``, ``1(234)``), a 1 with no letter or digit, nor
    a digit and one of ``-./:``, before it; else ``p``."""
    q = p - 1 if _at(text, p - 1) in (" ", "-") else p
    if _at(text, q - 1) != "1":
        return p
    before = _at(text, q - 2)
    if before in _ALNUM or (before in "-./:" and _at(text, q - 3) in _DIGITS):
        return p
    return q - 1


def _plus_dotted(groups: list[int], d: str) -> bool:
    """Whether dotted ``groups`` (digits ``d``) right after a ``+`` are an E.164 number with dots
    for spaces (``+44.20.7946.0958``, ``+33.6.12.34.56.78``): an assigned country code
    (:data:`_CC_ASSIGNED`) and 2+ more groups, those after the first of them 2+ digits long, not
    all of 3 (``+1.234.567``, a signed number with thousands separators), not four groups of 1-3
    digits (an IPv4 address), 10-15 digits (``+3.14159265`` is a signed decimal), 11 after the
    code 1 (NANP's length)."""
    return (len(groups) >= 3 and groups[0] <= 3 and d[:groups[0]] in _CC_ASSIGNED and min(groups[2:]) >= 2
            and any(g != 3 for g in groups[1:]) and not (len(groups) == 4 and max(groups) <= 3)
            and 10 <= len(d) <= 15 and (len(d) == 11 or d[:groups[0]] != "1"))


# ----------------------------------------------------------------------------------- IBAN
_IBAN_LENGTHS = {
    "AD": 24, "AE": 23, "AL": 28, "AT": 20, "AZ": 28, "BA": 20, "BE": 16, "BG": 22, "BH": 22,
    "BR": 29, "CH": 21, "CR": 22, "CY": 28, "CZ": 24, "DE": 22, "DK": 18, "DO": 28, "EE": 20,
    "EG": 29, "ES": 24, "FI": 18, "FO": 18, "FR": 27, "GB": 22, "GE": 22, "GI": 23, "GL": 18,
    "GR": 27, "GT": 28, "HR": 21, "HU": 28, "IE": 22, "IL": 23, "IS": 26, "IT": 27, "JO": 30,
    "KW": 30, "KZ": 20, "LB": 28, "LI": 21, "LT": 20, "LU": 20, "LV": 21, "MC": 27, "MD": 24,
    "ME": 22, "MK": 19, "MR": 27, "MT": 31, "MU": 30, "NL": 18, "NO": 15, "PK": 24, "PL": 28,
    "PS": 29, "PT": 25, "QA": 29, "RO": 24, "RS": 22, "SA": 24, "SE": 24, "SI": 19, "SK": 24,
    "SM": 27, "TN": 24, "TR": 26, "UA": 29, "VG": 24, "XK": 20,
}
_IBAN_CHARS = _ALNUM
_UPPER_TABLE = str.maketrans("abcdefghijklmnopqrstuvwxyz", "ABCDEFGHIJKLMNOPQRSTUVWXYZ")


def _mod97(iban: str) -> int:
    rearranged = iban[4:] + iban[:4]
    r = 0
    for ch in rearranged:
        v = ord(ch) - 48 if ch in _DIGITS else ord(ch) - 55
        r = (r * 100 + v) % 97 if v >= 10 else (r * 10 + v) % 97
    return r


def _iban(text: str, i: int) -> list[tuple[int, int, str, str]]:
    """An IBAN from ``i``: compact, or in groups of 4 split by single spaces or dashes, mixed or
    not, or by dots alone (``GB82.WEST.1234.5698.7654.32``; not running on into more dotted
    letters or digits, a host or module name). Letters
    may be lower case; then the BBAN needs a digit, and a compact one "iban" in the 40
    characters before it (a lower-case hex id of the right length passes mod-97 one time in 97)."""
    if _at(text, i - 1) in _ALNUM:
        return []
    if not (text[i] in _LETTERS and _at(text, i + 1) in _LETTERS and _at(text, i + 2) in _DIGITS
            and _at(text, i + 3) in _DIGITS):
        return []
    length = _IBAN_LENGTHS.get(text[i : i + 2].translate(_UPPER_TABLE))
    if length is None:
        return []
    sep = _at(text, i + 4)
    if sep in (" ", "-", "."):
        seps = (".",) if sep == "." else (" ", "-")
        chars = [text[i : i + 4]]
        count = 4
        j = i + 4
        dash = False
        while count < length:
            if _at(text, j) not in seps:
                return []
            dash = dash or text[j] == "-"
            g_end = _run_end(text, j + 1, _IBAN_CHARS, 5)
            glen = g_end - (j + 1)
            if glen == 0 or glen > 4 or count + glen > length or (glen < 4 and count + glen != length):
                return []
            chars.append(text[j + 1 : g_end])
            count += glen
            j = g_end
        end = j
        compact = "".join(chars)
        if dash and _at(text, end) == "-" and _at(text, end + 1) in _ALNUM:
            return []  # runs on: a key or id grouped by dashes, not an IBAN
        if sep == "." and _at(text, end) == "." and _at(text, end + 1) in _ALNUM:
            return []
    else:
        end = _run_end(text, i, _IBAN_CHARS, length + 1)
        if end - i != length:
            return []
        compact = text[i:end]
    if _at(text, end) in _ALNUM:
        return []
    if any(c in _LOWER for c in compact):
        if not any(c in _DIGITS for c in compact[4:]):
            return []
        if sep not in (" ", "-", ".") and not _window_has(text, i, 40, ("iban",)):
            return []
        compact = compact.translate(_UPPER_TABLE)
    return [(i, end, "IBAN", "mod97")] if _mod97(compact) == 1 else []


# ---------------------------------------------------------------------------------- email
_LOCAL = _WORD | set(".%+-")
_DOMAIN = _ALNUM | set(".-")
_URL_SEGMENT = _PRINTABLE - set("\"'<>`()")


_DB_SCHEMES = frozenset(
    {
        "postgres", "postgresql", "pgsql", "mysql", "mariadb", "mongodb", "mongodb+srv", "redis",
        "rediss", "amqp", "amqps", "mssql", "sqlserver", "oracle", "cockroachdb", "clickhouse",
        "couchdb", "cassandra", "neo4j", "memcached",
    }
)
_SCHEME = _ALNUM | set("+.-")


def _db_scheme(text: str, p: int) -> bool:
    """The scheme just before "://" at ``p`` names a database ("postgresql+asyncpg" reads as
    "postgresql"; "mongodb+srv" is its own)."""
    s = p
    while s > 0 and p - s <= 32 and text[s - 1] in _SCHEME:
        s -= 1
    scheme = _lower(text[s:p])
    if p - s > 32 or not scheme:
        return False
    return (scheme if scheme == "mongodb+srv" else scheme.split("+", 1)[0]) in _DB_SCHEMES


# An image drawn for a display density (icon@2x.png, hero@3x.webp: Apple's naming, all over web
# pages and their URLs) is no address: no TLD is an image format's extension. Only that shape
# (digits, optionally "." and digits, and an "x", then the extension), so alice@example.com.png
# keeps its address.
_IMAGE_EXTS = frozenset({"png", "jpg", "jpeg", "gif", "webp", "svg", "avif", "bmp", "tif", "tiff", "heic", "ico"})


def _density_image(label: str, tld: str) -> bool:
    # the density: digits, or digits "." digits (icon@1.5x.png)
    whole, dot, frac = label[:-1].partition(".")
    return (len(label) >= 2 and label[-1] in "xX" and whole != "" and (not dot or frac != "")
            and all(c in "0123456789" for c in whole + frac) and tld.lower() in _IMAGE_EXTS)


# File extensions. A name ending in one is a file, not a domain, unless the extension is a TLD too:
# zip and map (of these, the only ones in IANA's list of TLDs, version 2026112100, pinned in
# tests/data/iana-tlds.txt, which a test checks both lists against), so alice@corp.zip may be an
# address and lodash@4.17.21.tgz never is.
_FILE_EXTS = frozenset(
    {
        "zip", "tgz", "gz", "tar", "xz", "rar", "jar", "war", "whl", "egg", "gem", "deb", "rpm",
        "apk", "dmg", "exe", "msi", "iso", "js", "mjs", "cjs", "css", "map", "min", "json", "wasm",
        "html", "htm", "xml", "txt", "csv", "pdf",
    }
)
_TLD_EXTS = frozenset({"zip", "map"})
# Names a release channel takes in place of a version: npm's dist-tags, Homebrew's and the
# browsers' channels, git's default branches (pkg@latest.zip, core@dev.zip, repo@main.zip,
# app@latest.js.map).
_DIST_TAGS = frozenset(
    {
        "latest", "next", "beta", "alpha", "canary", "nightly", "rc", "stable", "dev", "edge",
        "experimental", "insiders", "preview", "snapshot", "lts", "main", "master",
    }
)


def _digits(s: str) -> bool:
    return s != "" and all(c in _DIGITS for c in s)


def _version_file(labels: list[str]) -> bool:
    """A file named for a package and its version (lodash@4.17.21.tgz, release@v2.zip,
    app@v2.bundle.js, jquery@3.7.1.min.js, pkg@2.tar.gz, pkg@latest.zip) is no address, in a URL
    or not: the domain (``labels``, 2+) ends in a file extension and starts with a version: "v"
    and digits, digits and a label of digits, or digits or a dist-tag and only extensions after
    them. Digits and a name (alice@163.com.csv, a file named for an address at 163.com) keep the
    address, and so does a dist-tag and a name (alice@dev.corp.zip). The addresses this misses
    are at a zip or map domain named so (alice@v2.zip, alice@163.zip, alice@latest.zip) or in a
    file named for one at a domain that starts so (alice@v2.corp.com.csv, alice@1.2.corp.com.csv).
    The caller has checked that the last label is a file extension."""
    first = labels[0]
    if first[0] in "vV" and _digits(first[1:]):
        return True
    if _digits(first) and _digits(labels[1]):
        return True
    return ((_digits(first) or _lower(first) in _DIST_TAGS)
            and all(_lower(x) in _FILE_EXTS for x in labels[1:]))


def _ext_file(labels: list[str]) -> bool:
    """The domain (``labels``) of an address-shaped text is a file's name
    (builds/agent@nightly.exe, notes@draft.txt, archive/main@abc.tgz), anywhere: its last labels
    are file extensions that are no TLD, so it is no domain whole, and what is left once they are
    taken off is no domain either (one label, or a last label that is not 2+ letters). A TLD is
    never taken off (u/alice@corp.zip is an address), and a file named for an address keeps it
    (exports/alice@corp.com.csv, alice@corp.zip.csv). The caller has checked that the last label
    is a file extension."""
    n = len(labels)
    while n > 0 and _lower(labels[n - 1]) in _FILE_EXTS and _lower(labels[n - 1]) not in _TLD_EXTS:
        n -= 1
    if n == len(labels):
        return False
    return n < 2 or len(labels[n - 1]) < 2 or any(c not in _LETTERS for c in labels[n - 1])


_HOST = _ALNUM | set(".-_:,[]")


def _host_list(text: str, a: int, q: int) -> bool:
    """``text[a:q]`` is a host list with no ":" (db.internal, h1,h2): after a ":" the parsers read
    what follows up to the "@" as a password, and a missed password is the worse miss."""
    return all(c in _HOST and c != ":" for c in text[a:q])


def _db_query_in(text: str, a: int, e: int) -> bool:
    """Whether a database URL's authority text ``text[a:e]`` holds the start of its query or
    fragment, before an address at ``e``: a "?" or "#" right after the credentials' "@" and a host
    list (u:p@db.example?to=...), or, with no "@" before it, after hosts with no ":" only
    when the address is a parameter's value (db.example?to=...). Any other "?" or "#" is the
    userinfo's (user:pa?ss@host, user:p#w@host, user:1234?x@host)."""
    at = -1
    host = False  # every character since the last "@" is a host's
    for q in range(a, e):
        c = text[q]
        if c == "@":
            at, host = q, True
        elif c in "?#" and at >= 0 and host and q > at + 1:
            return True
        elif c in "?#" and at < 0 and q > a and text[e - 1] == "=" and _host_list(text, a, q):
            return True
        elif c not in _HOST:
            host = False
    return False


def _email(text: str, p: int) -> list[tuple[int, int, str, str]]:
    ls = p
    while ls > 0 and p - ls <= 64 and text[ls - 1] in _LOCAL:
        ls -= 1
    if p - ls > 64:
        return []
    while ls < p and text[ls] == ".":
        ls += 1
    if ls == p or text[p - 1] == "." or ".." in text[ls:p]:
        return []
    de = _run_end(text, p + 1, _DOMAIN, 256)
    if de - (p + 1) > 255:
        return []
    while de > p + 1 and text[de - 1] in ".-":
        de -= 1
    labels = text[p + 1 : de].split(".")
    if len(labels) < 2:
        return []
    for label in labels:
        if not label or len(label) > 63 or label[0] == "-" or label[-1] == "-":
            return []
    tld = labels[-1]
    if len(tld) < 2 or any(c not in _UPPER and c not in _LOWER for c in tld):
        return []
    if _density_image(".".join(labels[:-1]), tld):
        return []
    # both file rules need a last label that is a file extension
    if _lower(tld) in _FILE_EXTS and (_version_file(labels) or _ext_file(labels)):
        return []
    # user@host in a URL's authority (scheme://user:pw@host) is not an e-mail address; one past
    # the authority (a path, query or fragment: /img.png?who=alice@example.com) is. RFC 3986 ends
    # the authority at "/", "?" or "#". A database URL's password holds "?" and "#" unescaped, so
    # its authority ends at "/", or at a "?" or "#" only after the credentials' "@" and a host
    # (_db_query_in).
    k = ls
    while k > 0 and ls - k < 256 and text[k - 1] in _URL_SEGMENT:
        k -= 1
    at = text.rfind("://", k, ls)
    if at >= 0:
        db = _db_scheme(text, at)
        ends = "/" if db else "/?#"
        if not any(c in ends for c in text[at + 3 : ls]) and not (db and _db_query_in(text, at + 3, ls)):
            return []
    return [(ls, de, "EMAIL", "format")]


# ------------------------------------------------------------------- URLs: databases, Slack
# '#' and '?' stay in: raw (unencoded) passwords contain them, and the last '@' ends the userinfo.
_AUTHORITY = _PRINTABLE - set("/\"'<>`")
_SLACK_HOOK = "://hooks.slack.com/services/"


def _url(text: str, p: int) -> list[tuple[int, int, str, str]]:
    out = []
    if _db_scheme(text, p):
        a_end = _run_end(text, p + 3, _AUTHORITY, 257)
        # The userinfo ends at the last "@", or, where an address follows in the query or fragment
        # (u:p@db.example?to=alice@example.com), at the last "@" before that address, which is
        # then found (a longer password would take it over).
        first = a_end
        k = text.find("@", p + 3, a_end)
        while k >= 0:
            address = _email(text, k)
            if address and _db_query_in(text, p + 3, address[0][0]):
                first = address[0][0]
                break
            k = text.find("@", k + 1, a_end)
        authority = text[p + 3 : a_end]
        at = authority.rfind("@", 0, first - (p + 3))
        if a_end - (p + 3) <= 256 and at > 0 and at < len(authority) - 1:
            colon = authority.find(":", 0, at)
            if colon != -1:
                pw_start, pw_end = p + 3 + colon + 1, p + 3 + at
                if pw_end > pw_start and not is_placeholder(text[pw_start:pw_end]):
                    out.append((pw_start, pw_end, "DATABASE_URL_PASSWORD", "url-userinfo"))
    if p >= 5 and _lower(text[p - 5 : p]) == "https" and text.startswith(_SLACK_HOOK, p):
        j = p + len(_SLACK_HOOK)
        parts = []
        for k in range(3):
            e = _run_end(text, j, _ALNUM, 257)
            parts.append(text[j:e])
            j = e
            if k < 2:
                if _at(text, j) != "/":
                    return out
                j += 1
        t, b, secret = parts
        if t[:1] == "T" and b[:1] == "B" and len(t) >= 8 and len(b) >= 8 and 16 <= len(secret) <= 256:
            if _at(text, j) not in _WORD and not _has_example(text, p - 5, j):
                out.append((p - 5, j, "SLACK_TOKEN", "format"))
    return out


# -------------------------------------------------------------------------- prefixed tokens
# base64 of a PyPI macaroon's first bytes, which name its location: pypi.org or test.pypi.org.
_PYPI_MACAROONS = ("AgEIcHlwaS5vcmc", "AgENdGVzdC5weXBpLm9yZw")
# Doppler's documented token kinds (docs.doppler.com, "Auth Token Formats"); "st." last: only a
# service token may name its config before the token (dp.st.dev.<token>).
_DOPPLER_KINDS = ("ct.", "pt.", "sa.", "said.", "scim.", "audit.", "st.")
_DOPPLER_CONFIG = _LOWER | _DIGITS | {"_", "-"}
_UPPER_DIGITS = _UPPER | _DIGITS
_AWS_PREFIXES = ("AKIA", "ASIA", "AGPA", "AIDA", "AROA", "ANPA", "ANVA", "AIPA")
_BASE32 = _UPPER | set("234567")


def _classes(value: str) -> tuple[bool, bool, bool]:
    return (
        any(c in _LOWER for c in value),
        any(c in _UPPER for c in value),
        any(c in _DIGITS for c in value),
    )


_LOWER_HEX = frozenset("0123456789abcdef")


def _hex_body(text: str, p: int, n: int) -> bool:
    """The run of letters and digits at ``p`` is exactly ``n`` long: lowercase hex with a letter and a digit."""
    body = text[p : p + n]
    return (
        _run_end(text, p, _ALNUM, n + 1) == p + n
        and all(c in _LOWER_HEX for c in body)
        and any(c in _DIGITS for c in body)
        and any(c in _LETTERS for c in body)
    )


def _token(text: str, i: int) -> list[tuple[int, int, str, str]]:
    """Prefixed tokens: every anchor is the start of a maximal run of the token's alphabet."""
    out = []
    prev = _at(text, i - 1)
    head = text[i : i + 11]
    if prev not in _ALNUM and head[:4] in _AWS_PREFIXES:
        e = _run_end(text, i, _ALNUM, 21)
        if e - i == 20 and all(c in _BASE32 for c in text[i + 4 : e]):
            out.append((i, e, "AWS_ACCESS_KEY", "format"))
    # Tokens may be wrapped in "_" (Markdown emphasis, snake_case glue): "_" before a prefix and
    # after a fixed-length body does not hide them.
    if prev not in _ALNUM and head[:1] == "g":
        if head[:4] in ("ghp_", "gho_", "ghu_", "ghs_", "ghr_"):
            e = _run_end(text, i + 4, _ALNUM, 37)
            if e - i == 40 and _at(text, e) not in _ALNUM:
                out.append((i, e, "GITHUB_TOKEN", "format"))
        elif head == "github_pat_" and _run_end(text, i + 11, _ALNUM, 23) == i + 33 and _at(text, i + 33) == "_":
            e = _run_end(text, i + 34, _ALNUM, 60)
            if e - i == 93:
                out.append((i, e, "GITHUB_TOKEN", "format"))
    if prev not in _ALNUM_DASH and head[:6] == "glpat-":
        e = _run_end(text, i, _WORD_DASH, 257)
        if 20 <= e - i - 6 <= 50:
            out.append((i, e, "GITLAB_TOKEN", "format"))
    if prev not in _ALNUM_DASH and head[:3] == "xox" and head[3:5] in ("b-", "a-", "p-", "r-", "s-"):
        e = _run_end(text, i, _ALNUM_DASH, 257)
        rest = text[i + 5 : e]
        if 10 <= len(rest) and e - i <= 256 and any(c in _DIGITS for c in rest):
            out.append((i, e, "SLACK_TOKEN", "format"))
    if prev not in _ALNUM and head[:8] in ("sk_live_", "sk_test_", "rk_live_", "rk_test_"):
        e = _run_end(text, i + 8, _ALNUM, 248)
        if 16 <= e - (i + 8) <= 247:
            out.append((i, e, "STRIPE_KEY", "format"))
    if prev not in _ALNUM_DASH and head[:3] == "sk-":
        e = _run_end(text, i, _WORD_DASH, 257)
        rest = text[i + 3 : e]
        if 32 <= len(rest) <= 253 and all(_classes(rest)):
            out.append((i, e, "ANTHROPIC_KEY" if head[:7] == "sk-ant-" else "OPENAI_KEY", "format"))
    # Bodies that may hold "_" and "-" end where that alphabet ends: no match inside a longer token.
    if prev not in _ALNUM_DASH and head[:4] == "AIza" and _run_end(text, i + 4, _WORD_DASH, 36) == i + 39:
        out.append((i, i + 39, "GOOGLE_API_KEY", "format"))
    if prev not in _ALNUM_DASH and head[:7] == "GOCSPX-" and _run_end(text, i + 7, _WORD_DASH, 29) == i + 35:
        out.append((i, i + 35, "GOOGLE_OAUTH_SECRET", "format"))
    if prev not in _ALNUM and head[:4] == "npm_" and _run_end(text, i + 4, _ALNUM, 37) == i + 40:
        if all(_classes(text[i + 4 : i + 40])):
            out.append((i, i + 40, "NPM_TOKEN", "format"))
    if prev not in _ALNUM_DASH and head[:5] == "pypi-" and text.startswith(_PYPI_MACAROONS, i + 5):
        e = _run_end(text, i, _WORD_DASH, 1025)
        if 70 <= e - i <= 1024:
            out.append((i, e, "PYPI_TOKEN", "format"))
    if prev not in _ALNUM_DASH and prev != "." and head[:3] == "SG.":
        e1 = _run_end(text, i + 3, _WORD_DASH, 23)
        if e1 == i + 25 and _at(text, e1) == "." and _run_end(text, i + 26, _WORD_DASH, 44) == i + 69:
            if not (_at(text, i + 69) == "." and _at(text, i + 70) in _WORD_DASH):
                out.append((i, i + 69, "SENDGRID_KEY", "format"))
    if prev not in _ALNUM and head[:2] == "SK" and _run_end(text, i + 2, _ALNUM, 33) == i + 34:
        body = text[i + 2 : i + 34]
        if all(c in _HEX for c in body) and any(c in _DIGITS for c in body) and any(c in _LETTERS for c in body):
            out.append((i, i + 34, "TWILIO_KEY", "format"))
    if prev not in _ALNUM and head[:3] == "hf_" and _run_end(text, i + 3, _ALNUM, 35) == i + 37:
        body = text[i + 3 : i + 37]
        upper = sum(c in _UPPER for c in body)
        lower = sum(c in _LOWER for c in body)
        # A camelCase name of 34 letters (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) has a few capitals.
        if upper + lower == 34 and upper >= 8 and lower >= 8:
            out.append((i, i + 37, "HUGGINGFACE_TOKEN", "format"))
    if prev not in _ALNUM and head[:3] == "shp" and head[3:6] in ("at_", "ca_", "pa_", "ss_") and _hex_body(text, i + 6, 32):
        out.append((i, i + 38, "SHOPIFY_TOKEN", "format"))
    if prev not in _ALNUM and head[:7] in ("dop_v1_", "doo_v1_", "dor_v1_") and _hex_body(text, i + 7, 64):
        out.append((i, i + 71, "DIGITALOCEAN_TOKEN", "format"))
    # "key-" is an everyday word: not after a name's "_", "-" or ".", and not before more of a
    # name (key-<md5>-v2, key-<md5>.json).
    if prev not in _WORD_DASH and prev != "." and head[:4] == "key-" and _hex_body(text, i + 4, 32):
        a, a2 = _at(text, i + 36), _at(text, i + 37)
        if a not in _WORD_DASH and not (a == "." and a2 in _WORD_DASH):
            out.append((i, i + 36, "MAILGUN_KEY", "format"))
    if prev not in _ALNUM and head[:4] == "dapi" and _hex_body(text, i + 4, 32):
        # A token may carry a "-2" suffix; any other "-" continues a longer name.
        e = i + 36
        if _at(text, e) == "-":
            d = _run_end(text, e + 1, _DIGITS, 3)
            e = d if e + 1 < d <= e + 3 and _at(text, d) not in _ALNUM_DASH else 0
        if e:
            out.append((i, e, "DATABRICKS_TOKEN", "format"))
    if prev not in _ALNUM_DASH and head[:5] == "PMAK-" and _hex_body(text, i + 5, 24) and _at(text, i + 29) == "-":
        if _hex_body(text, i + 30, 34) and _at(text, i + 64) != "-":
            out.append((i, i + 64, "POSTMAN_KEY", "format"))
    if prev not in _ALNUM and head[:8] == "lin_api_" and _run_end(text, i + 8, _ALNUM, 41) == i + 48:
        if sum(_classes(text[i + 8 : i + 48])) >= 2:
            out.append((i, i + 48, "LINEAR_KEY", "format"))
    if prev not in _ALNUM_DASH and prev != "." and head[:3] == "dp.":
        for kind in _DOPPLER_KINDS:
            if not text.startswith(kind, i + 3):
                continue
            p = i + 3 + len(kind)
            if kind == "st.":
                g = _run_end(text, p, _DOPPLER_CONFIG, 36)
                if 2 <= g - p <= 35 and _at(text, g) == ".":
                    p = g + 1
            e = _run_end(text, p, _ALNUM, 45)
            a, a2 = _at(text, e), _at(text, e + 1)
            if 40 <= e - p <= 44 and sum(_classes(text[p:e])) >= 2 and a not in _WORD_DASH:
                if not (a == "." and a2 in _WORD_DASH):
                    out.append((i, e, "DOPPLER_TOKEN", "format"))
            break
    # Slack app-level token: xapp-<digit>-<app id>-<digits>-<64 hex>.
    if prev not in _ALNUM_DASH and head[:5] == "xapp-" and _at(text, i + 5) in _DIGITS and _at(text, i + 6) == "-":
        p = i + 7
        q = _run_end(text, p, _UPPER_DIGITS, 21)
        if 5 <= q - p <= 20 and _at(text, q) == "-":
            r = _run_end(text, q + 1, _DIGITS, 21)
            if 5 <= r - q - 1 <= 20 and _at(text, r) == "-" and _hex_body(text, r + 1, 64) and _at(text, r + 65) != "-":
                out.append((i, r + 65, "SLACK_TOKEN", "format"))
    # An Azure storage connection string's AccountKey: base64 of 64 bytes, so 86 characters, the
    # last of them one of "AQgw" (2 bits of data), then "==". Only the value is the secret.
    if prev not in _ALNUM and text.startswith("AccountKey=", i):
        p = i + 11
        a = _at(text, p + 88)
        if _run_end(text, p, _B64, 87) == p + 86 and text[p + 85] in "AQgw" and text[p + 86 : p + 88] == "==":
            if a not in _B64 and a != "=" and all(_classes(text[p : p + 86])):
                out.append((p, p + 88, "AZURE_STORAGE_KEY", "format"))
    return [f for f in out if not _has_example(text, f[0], f[1])]


# ---------------------------------------------------------------------------------- JWT
_JWT_SEGMENT = _WORD_DASH


def _b64url_decode(seg: str) -> bytes | None:
    if len(seg) % 4 == 1:
        return None
    return base64.urlsafe_b64decode(seg + "=" * (-len(seg) % 4))


def _jwt_header_ok(header: bytes) -> bool:
    h = header.strip(b" \t\r\n")
    if not (h.startswith(b"{") and h.endswith(b"}")):
        return False
    k = h.find(b'"alg"')
    while k != -1:
        rest = h[k + 5 :].lstrip(b" \t\r\n")
        if rest.startswith(b":"):
            return True
        k = h.find(b'"alg"', k + 1)
    return False


def _jwt(text: str, i: int) -> list[tuple[int, int, str, str]]:
    prev = _at(text, i - 1)
    if prev in _ALNUM_DASH or prev == ".":  # "_" may wrap it, as it may wrap other tokens
        return []
    e1 = _run_end(text, i, _JWT_SEGMENT, 4097)
    if e1 - i > 4096 or _at(text, e1) != ".":
        return []
    e2 = _run_end(text, e1 + 1, _JWT_SEGMENT, 65537)
    if e2 - (e1 + 1) < 2 or e2 - (e1 + 1) > 65536 or _at(text, e2) != ".":
        return []
    e3 = _run_end(text, e2 + 1, _JWT_SEGMENT, 4097)
    if e3 - (e2 + 1) > 4096:
        return []
    header = _b64url_decode(text[i:e1])
    if header is None or not _jwt_header_ok(header) or _has_example(text, i, e3):
        return []
    return [(i, e3, "JWT", "jwt-header-json")]


# ---------------------------------------------------------------------------------- PEM
_PEM_BEGIN = "-----BEGIN "
_PEM_LABEL = _UPPER | _DIGITS | {" "}
_PEM_BODY = _B64 | set("=\r\n\t \\")


def _pem(text: str, i: int) -> list[tuple[int, int, str, str]]:
    ls = i + len(_PEM_BEGIN)
    le = _run_end(text, ls, _PEM_LABEL, 65)
    label = text[ls:le]
    if le - ls > 64 or "PRIVATE KEY" not in label or not text.startswith("-----", le):
        return []
    h = le + 5
    nxt = text.find(_PEM_BEGIN, h)
    region_end = len(text) if nxt == -1 else nxt
    marker = "-----END " + label + "-----"
    q = text.find(marker, h, region_end)
    if q != -1:
        return [(i, q + len(marker), "PRIVATE_KEY", "pem-armor")]
    e = _run_end(text, h, _PEM_BODY, region_end - h)
    while e > h and text[e - 1] in "\r\n\t \\":
        e -= 1
    return [(i, e, "PRIVATE_KEY", "pem-begin")]


# ------------------------------------------------------------------- 40-character AWS secret
_AWS_SECRET_PREV_STOP = _B64 | {"_", "-"}
_AWS_SECRET_NEXT_STOP = _B64 | {"_", "-", "="}


def _is_hex_digest(value: str) -> bool:
    return len(value) in (32, 40, 64) and all(c in _HEX for c in value)


def _aws_secret(text: str, i: int) -> list[tuple[int, int, str, str]]:
    if _at(text, i - 1) in _AWS_SECRET_PREV_STOP:
        return []
    e = _run_end(text, i, _B64, 41)
    if e - i != 40 or _at(text, e) in _AWS_SECRET_NEXT_STOP:
        return []
    value = text[i:e]
    if not all(_classes(value)) or _is_hex_digest(value) or "example" in _lower(value):
        return []
    h = entropy(value)
    if h >= 3.5 and _window_has(text, i, 64, ("aws", "secret")):
        return [(i, e, "AWS_SECRET_KEY", "aws-context")]
    if h >= 4.5 and ("+" in value or "/" in value):
        return [(i, e, "AWS_SECRET_KEY", "entropy>=4.5")]
    return []


# ---------------------------------------------------------------- generic name = value secrets
_NAME = _WORD | set(".-")
_SECRET_WORDS = frozenset(
    {
        "key", "keys", "secret", "secrets", "token", "tokens", "password", "passwords", "passwd",
        "pwd", "pass", "passphrase", "auth", "credential", "credentials", "apikey", "pw", "passcode",
        "authorization",
    }
)
_SECRET_SUFFIXES = (
    "secret", "token", "password", "passwd", "pwd", "pass", "apikey", "authkey", "privatekey", "accesskey",
    "secretkey",
)
_NAME_STOP = frozenset(
    {
        "url", "uri", "path", "file", "filename", "dir", "name", "id", "ids", "count", "len",
        "length", "size", "type", "header", "field", "env", "var", "prefix", "suffix", "format",
        "fmt", "mode", "ttl", "timeout", "expiry", "expires", "expiration", "endpoint", "method",
        "kind", "policy", "label", "hint", "min", "max", "regex", "pattern", "reset", "limit",
        "version", "algorithm", "alg", "location", "host", "port", "user", "username", "enabled",
    }
)
_BARE = _PRINTABLE - set("\"'`,;(){}[]<>")
_QUOTES = frozenset("\"'`")
_VALUE = frozenset(chr(c) for c in range(0x20, 0x7F))
_QUOTED = {q: _VALUE - {q} for q in _QUOTES}
_UUID_SHAPE = (8, 4, 4, 4, 12)


def name_components(name: str) -> list[str]:
    """Split an identifier into lower-case words at ``_ . -`` and camelCase boundaries."""
    parts: list[str] = []
    cur = ""
    for k, c in enumerate(name):
        if c in "_.-":
            if cur:
                parts.append(cur)
            cur = ""
            continue
        prev = name[k - 1] if k > 0 else ""
        nxt = name[k + 1] if k + 1 < len(name) else ""
        if cur and c in _UPPER and (prev in _LOWER or prev in _DIGITS or (prev in _UPPER and nxt in _LOWER)):
            parts.append(cur)
            cur = ""
        cur += c
    if cur:
        parts.append(cur)
    return [_lower(p) for p in parts]


_PASSWORD_WORDS = frozenset({"password", "passwords", "passwd", "pwd", "pass", "passphrase", "pw", "passcode"})
_PASSWORD_SUFFIXES = ("password", "passwd", "pwd", "pass")
# English words that end in "pass" but name no password.
_NOT_PASS = frozenset({"bypass", "compass", "encompass", "surpass", "trespass", "overpass", "underpass"})


def _word_core(part: str) -> str:
    """A name component without trailing digits and then a trailing "value" (``password1``,
    ``tokenvalue``): what is left is the word the checks look at."""
    core = part.rstrip("0123456789")
    if len(core) > 5 and core.endswith("value"):
        core = core[:-5]
    return core


# Last words of a name that name an attribute of a credential, not the credential:
# ``auth_provider: google-oauth2-provider`` names who issues it. Under such a name a value is a
# secret only when it does not read as a name (:func:`_identifier_like`). The singular stop words
# (type, policy, method...) are in _NAME_STOP already; none of these names a field that holds the
# secret itself (no value, data, code, hash, state, grant, nonce, session).
_ATTRIBUTE_WORDS = frozenset(
    {
        "provider", "providers", "issuer", "issuers", "audience", "audiences", "scheme", "schemes",
        "realm", "realms", "tenant", "tenants", "domain", "domains", "server", "servers", "service",
        "services", "backend", "backends", "vendor", "vendors", "client", "clients", "strategy",
        "strategies", "protocol", "protocols", "flow", "flows", "factor", "factors", "usage",
        "rotation", "strength", "level", "levels", "status", "statuses", "region", "regions", "zone",
        "zones", "owner", "owners", "source", "sources", "group", "groups", "role", "roles", "scope",
        "scopes", "tier", "tiers", "vault", "vaults", "manager", "managers", "algo", "algos",
        "purpose", "types", "policies", "methods", "modes", "kinds", "names", "labels", "versions",
        "algorithms", "formats",
    }
)


def _secret_name(name: str) -> tuple[bool, bool, bool]:
    """``(secret-like, password-like, attribute)`` for an assigned name; ``attribute`` when it is
    secret-like and its last word is in :data:`_ATTRIBUTE_WORDS`."""
    parts = [_word_core(p) for p in name_components(name)]
    if not parts or parts[-1] in _NAME_STOP:
        return False, False, False
    last = parts[-1]
    parts = [p for p in parts if p not in _NOT_PASS]
    secret = any(p in _SECRET_WORDS or p.endswith(_SECRET_SUFFIXES) for p in parts)
    password = any(p in _PASSWORD_WORDS or p.endswith(_PASSWORD_SUFFIXES) for p in parts)
    return secret, password, secret and last in _ATTRIBUTE_WORDS


_IDENT_SEPS = frozenset("-_.:/")


def _identifier_like(value: str) -> bool:
    """Whether ``value`` reads as a name (``google-oauth2-provider``, ``eu-west-1``): runs of
    letters and digits joined by single ``- _ . : /``, changing between lower case, upper case and
    digits at most 4 times (a lower-case letter then an upper-case letter or digit, an upper-case
    letter then a digit, a digit then a letter). A random token changes at nearly every other
    character."""
    if not value or value[0] in _IDENT_SEPS or value[-1] in _IDENT_SEPS:
        return False
    changes = 0
    for a, b in zip(value, value[1:]):
        if a in _IDENT_SEPS:
            if b in _IDENT_SEPS:
                return False
        elif (a in _LOWER and (b in _UPPER or b in _DIGITS)) or (a in _UPPER and b in _DIGITS) or (
                a in _DIGITS and b in _LETTERS):
            changes += 1
    return changes <= 4 and all(c in _ALNUM or c in _IDENT_SEPS for c in value)


def _is_uuid(value: str) -> bool:
    groups = value.split("-")
    return tuple(len(g) for g in groups) == _UUID_SHAPE and all(c in _HEX for g in groups for c in g)


def _is_attr_path(value: str) -> bool:
    """``module.attr`` / ``self.x.y``: dotted names none of which starts with a digit, the first a
    lower-case name of 3+ characters (``win32api.RegEnumKey``, ``x25519.X25519PublicKey``)."""
    segs = value.split(".")
    if len(segs) < 2 or any(not s or s[0] in _DIGITS for s in segs):
        return False
    return len(segs[0]) >= 3 and all(c in _LOWER or c in _DIGITS or c == "_" for c in segs[0])


def _generic_value(value: str, quoted: bool, password: bool, attribute: bool = False) -> str | None:
    """The validator that accepts ``value`` as an assigned secret, or None.

    Any secret-like name: 16+ characters, two character classes, entropy >= 3.5 bits/char.
    A password-like name also accepts 8+ characters using three of lower/upper/digit/symbol,
    because real passwords are often too short to reach the entropy threshold. Under a name that
    names an attribute of a credential (``attribute``: ``auth_provider``) a value that reads as a
    name (:func:`_identifier_like`) is not accepted.
    """
    n = len(value)
    if not (8 if password else 16) <= n <= 256 or " " in value or "\t" in value:
        return None
    if is_placeholder(value) or "://" in value or value[0] in "/~" or value.startswith(("./", "../")):
        return None
    if _is_uuid(value) or _is_hex_digest(value):
        return None
    lower, upper, digit = _classes(value)
    symbol = any(c not in _ALNUM and c not in "_-." for c in value)
    if not quoted and all(c in _WORD or c == "." for c in value) and (not digit or _is_attr_path(value)):
        return None  # a bare identifier or attribute path is a reference, not a literal
    if attribute and _identifier_like(value):
        return None
    kinds = lower + upper + digit + symbol
    if n >= 16 and kinds >= 2 and entropy(value) >= 3.5:
        return "entropy>=3.5"
    if password and kinds >= 3:
        return "password-charset"
    return None


# HTTP authorization schemes: "Authorization: Bearer <token>" assigns the token, not the scheme.
_AUTH_SCHEMES = ("bearer", "basic", "token")


def _scheme_skip(text: str, v: int) -> int:
    """Where the value starts when an authorization scheme word and its spaces begin it at ``v``."""
    for w in _AUTH_SCHEMES:
        e = v + len(w)
        if _lower(text[v:e]) == w and _at(text, e) == " ":
            while _at(text, e) == " ":
                e += 1
            return e if _at(text, e) not in ("", "\t", "\r", "\n") else v
    return v


def _quoted_end(text: str, i: int, q: str, limit: int) -> int:
    """End of a quoted value from ``i`` (at most ``limit`` characters): a backslash takes the next
    character with it, so ``\\"`` inside ``"..."`` (JSON, most languages) does not end it."""
    n = min(len(text), i + limit)
    chars = _QUOTED[q]
    j = i
    while j < n and text[j] in chars:
        j += 2 if text[j] == "\\" and j + 1 < n and text[j + 1] in _VALUE else 1
    return j


def _generic(text: str, p: int) -> list[tuple[int, int, str, str]]:
    sep = text[p]
    nxt = _at(text, p + 1)
    prev = _at(text, p - 1)
    v = p + 1
    if sep == "=":
        if nxt == "=" or prev in "=!<>:":
            return []
        if nxt == ">":
            v += 1
    else:
        if nxt == ":" or prev == ":" or nxt == "/":
            return []
        if nxt == "=":
            v += 1
    k = p
    while k > 0 and text[k - 1] in " \t":
        k -= 1
    if _at(text, k - 1) in ("\"", "'"):
        k -= 1
    ne = k
    while k > 0 and ne - k <= 64 and text[k - 1] in _NAME:
        k -= 1
    if ne - k > 64 or ne == k:
        return []
    name = text[k:ne]
    secret, password, attribute = _secret_name(name)
    if not secret or not any(c in _UPPER or c in _LOWER for c in name):
        return []
    return _assigned(text, v, password, attribute)


def _line_indent(text: str, v: int) -> int:
    """Indentation (spaces) of the line holding ``v``, or -1 when its start is not within 256
    printable ASCII characters before ``v``."""
    k = v
    while k > 0 and v - k < 256 and text[k - 1] in _VALUE:
        k -= 1
    if k > 0 and text[k - 1] != "\n":
        return -1
    return _run_end(text, k, frozenset(" "), v - k) - k


def _block_scalar(text: str, v: int, password: bool, attribute: bool) -> list[tuple[int, int, str, str]] | None:
    """A YAML block scalar at ``v`` (``|`` or ``>``, optional indicators, end of line): the
    finding for its first line when indented deeper than the key's line; None if not one."""
    j = v + 1
    for _ in range(2):
        if _at(text, j) in ("+", "-") or _at(text, j) in _DIGITS and _at(text, j) != "0":
            j += 1
    while _at(text, j) in (" ", "\t"):
        j += 1
    if _at(text, j) == "\r":
        j += 1
    if _at(text, j) != "\n":
        return None
    indent = _line_indent(text, v)
    j += 1
    vs = _run_end(text, j, frozenset(" "), 257)
    if indent < 0 or vs - j <= indent:
        return []
    e = _run_end(text, vs, _VALUE, 257)
    if e - vs > 256 or _at(text, e) not in ("", "\r", "\n"):
        return []
    validator = _generic_value(text[vs:e], False, password, attribute)
    return [(vs, e, "GENERIC_SECRET", validator)] if validator else []


def _next_param(text: str, v: int, e: int) -> int:
    """Where a bare value ``text[v:e]`` ends when a query-string or form parameter follows it
    (``&`` or ``&amp;``, a name and ``=``): ``token=v&page=2`` assigns ``v``; else ``e``."""
    j = text.find("&", v, e)
    while j != -1:
        k = j + 5 if text.startswith("amp;", j + 1) else j + 1
        ne = _run_end(text, k, _NAME, 65)
        if k < ne <= k + 64 and _at(text, ne) == "=":
            return j
        j = text.find("&", j + 1, e)
    return e


def _assigned(text: str, v: int, password: bool, attribute: bool = False) -> list[tuple[int, int, str, str]]:
    """The GENERIC_SECRET finding for the value assigned from ``v`` (after spaces), if any."""
    n = len(text)
    while v < n and text[v] in " \t":
        v += 1
    q = _at(text, v)
    if q in ("|", ">"):
        block = _block_scalar(text, v, password, attribute)
        if block is not None:
            return block
    if q in _QUOTES:
        e = _quoted_end(text, v + 1, q, 513)
        if _at(text, e) != q:
            return []
        start, end, quoted = min(_scheme_skip(text, v + 1), e), e, True
    else:
        v = _scheme_skip(text, v)
        e = _next_param(text, v, _run_end(text, v, _BARE, 257))
        if e - v > 256 or _at(text, e) == "(":
            return []
        start, end, quoted = v, e, False
    validator = _generic_value(text[start:end], quoted, password, attribute)
    return [(start, end, "GENERIC_SECRET", validator)] if validator else []


def _secret_field(name: str) -> tuple[bool, bool, bool]:
    """``_secret_name`` of a name written in another field than its value (needs a letter)."""
    if not any(c in _UPPER or c in _LOWER for c in name):
        return False, False, False
    return _secret_name(name)


_TAG_VALUE = _VALUE - {"<"}


_CDATA = "<![CDATA["
_ATTRS = _VALUE - {"<", ">"}


def _attr_secret(text: str, a: int, b: int) -> tuple[bool, bool, bool]:
    """``_secret_field`` of the name in the first ``key="..."``/``name="..."`` attribute of the
    tag text ``text[a:b]``; ``(False, False, False)`` without one."""
    q = text.find(" ", a, b)
    while q != -1:
        for word in ("key", "name"):
            e = q + 1 + len(word)
            quote = _at(text, e + 1)
            if text.startswith(word, q + 1) and _at(text, e) == "=" and quote in ("\"", "'"):
                ve = _run_end(text, e + 2, _NAME, 65)
                if e + 2 < ve <= e + 66 and _at(text, ve) == quote:
                    return _secret_field(text[e + 2 : ve])
        q = text.find(" ", q + 1, b)
    return False, False, False


def _xml_element(text: str, p: int) -> list[tuple[int, int, str, str]]:
    """``<password>value</password>``: an element whose tag is a secret name (``text[p]`` is ``<``),
    or that has attributes and one ``key``/``name`` attribute naming a secret
    (``<entry key="db.password">value</entry>``); the value may be a CDATA section
    (``<password><![CDATA[value]]></password>``)."""
    k = p + 1
    e = _run_end(text, k, _NAME, 65)
    if e == k or e - k > 64:
        return []
    name = text[k:e]
    secret, password, attribute = _secret_field(name)
    if _at(text, e) == " ":
        te = _run_end(text, e, _ATTRS, 257)
        if te - e > 256 or _at(text, te) != ">" or text[te - 1] == "/":
            return []
        if not secret:
            secret, password, attribute = _attr_secret(text, e, te)
        e = te
    elif _at(text, e) != ">":
        return []
    if not secret:
        return []
    v = e + 1
    if text.startswith(_CDATA, v):
        v += len(_CDATA)
        ve = text.find("]]>", v, _run_end(text, v, _VALUE, 259))
        if ve < 0 or ve - v > 256:
            return []
        tail = ve + 3
    else:
        ve = _run_end(text, v, _TAG_VALUE, 257)
        if ve - v > 256:
            return []
        tail = ve
    close = tail + 2 + len(name)
    if text[tail:tail + 2] != "</" or text[tail + 2:close] != name or _at(text, close) != ">":
        return []
    while v < ve and text[v] == " ":
        v += 1
    while ve > v and text[ve - 1] == " ":
        ve -= 1
    value = text[v:ve]
    validator = (_spaced_value(value, password, attribute) if " " in value
                 else _generic_value(value, False, password, attribute))
    return [(v, ve, "GENERIC_SECRET", validator)] if validator else []


# Words that make an element's spaced value read as prose or a placeholder, not a passphrase
# ("Enter your password here", "Same as the admin one", "not set").
_PROSE_WORDS = _PLACEHOLDER_WORDS | frozenset(
    {
        "a", "an", "the", "this", "that", "these", "those", "it", "its", "you", "your", "me", "my", "we",
        "our", "they", "their", "he", "his", "she", "her", "here", "there", "where", "when", "what",
        "which", "who", "how", "why", "is", "are", "was", "were", "be", "been", "am", "do", "does",
        "did", "has", "have", "had", "will", "would", "can", "could", "should", "must", "may",
        "might", "to", "of", "in", "on", "at", "by", "for", "from", "with", "without", "into", "over",
        "under", "about", "as", "via", "per", "than", "then", "and", "or", "but", "not", "no", "if",
        "else", "so", "all", "any", "each", "every", "some", "see", "use", "used", "using", "enter",
        "insert", "put", "type", "set", "unset", "change", "replace", "ask", "same", "get", "please",
        "note", "value", "required", "optional", "unknown", "hidden", "passwords", "passphrase",
        "secrets", "key", "keys", "api", "credential", "credentials", "e.g", "i.e", "etc",
    }
)
_PASSPHRASE_WORDS = (2, 8)  # how many words a passphrase has
_WORD_PUNCT = "\"'`()[]{},.;:!?"  # stripped from the ends of a word before it is judged
_KEY_CHARS = _ALNUM | set("+/=_-.")  # what a word that is a key by itself is made of


def _spaced_value(value: str, password: bool, attribute: bool) -> str | None:
    """The validator that accepts ``value``, which has spaces inside, as the content of an
    element named like a secret (``<password>correct horse battery staple</password>``), or None.

    Not a placeholder as a whole, and then: one of its words, without the punctuation around it
    (:data:`_WORD_PUNCT`), is a key by itself: only :data:`_KEY_CHARS`, a digit, and accepted by
    :func:`_generic_value` as an unquoted value of a name that is not password-like (16+
    characters, entropy); or, for a password-like name only, a passphrase ("passphrase"): 12+
    characters, 2-8 words split by single spaces, none of them (punctuation aside) in
    :data:`_PROSE_WORDS`, and either 3+ words of lower-case letters only or a word with a digit
    among three of lower/upper/digit/symbol. Other secret names (``<key>Track ID</key>`` in a
    plist, ``<token>New York</token>``) need the word that is a key by itself. Under an attribute
    name (``attribute``, see :func:`_generic_value`) a word that reads as a name is no key, and
    no value is a passphrase: it would read as the attribute's name.
    """
    if is_placeholder(value):
        return None
    words = value.split(" ")
    for w in words:
        w = w.strip(_WORD_PUNCT)
        if all(c in _KEY_CHARS for c in w) and any(c in _DIGITS for c in w):
            validator = _generic_value(w, False, False, attribute)
            if validator:
                return validator
    lo, hi = _PASSPHRASE_WORDS
    if not password or attribute or len(value) < 12 or not lo <= len(words) <= hi or "" in words:
        return None
    if any(_lower(w.strip(_WORD_PUNCT)) in _PROSE_WORDS for w in words):
        return None
    if len(words) >= 3 and all(c in _LOWER or c == " " for c in value):
        return "passphrase"
    for w in words:
        lower, upper, digit = _classes(w)
        symbol = any(c not in _ALNUM for c in w)
        if digit and lower + upper + digit + symbol >= 3:
            return "passphrase"
    return None


_PAIR_WINDOW = 200  # how far past the name a pair's value field may start
_USER = _NAME | {"@"}


def _field_sep(text: str, j: int) -> int:
    """After a field word at ``j``: its closing quote, spaces and ``:``/``=``; where the value
    starts, or -1."""
    if _at(text, j) in ("\"", "'"):
        j += 1
    while _at(text, j) in (" ", "\t"):
        j += 1
    return j + 1 if _at(text, j) in (":", "=") else -1


def _pair(text: str, p: int) -> list[tuple[int, int, str, str]]:
    """``name: DB_PASSWORD`` / ``key="ApiKey"`` followed (within ``_PAIR_WINDOW``, in the same
    object, element or list item) by a ``value`` field: the value is the secret. The field names
    may share a camelCase prefix: ``ParameterKey=DbPassword,ParameterValue=v``."""
    prefix = ""
    if _at(text, p - 1) in _NAME:
        if text[p] not in "KN" or _at(text, p - 1) not in _LOWER:
            return []
        ps = p - 1
        while ps > 0 and p - ps < 64 and text[ps - 1] in _ALNUM:
            ps -= 1
        if _at(text, ps - 1) in _NAME or text[ps] not in _LETTERS:
            return []
        prefix = text[ps:p]
    value_word = prefix + "Value"
    for word in ("name", "key"):
        e = p + len(word)
        if _lower(text[p:e]) == word and _at(text, e) not in _NAME:
            break
    else:
        return []
    j = _field_sep(text, e)
    if j < 0:
        return []
    while _at(text, j) in (" ", "\t"):
        j += 1
    q = _at(text, j)
    if q in ("\"", "'"):
        j += 1
    ne = _run_end(text, j, _NAME, 65)
    if ne == j or ne - j > 64 or (q in ("\"", "'") and _at(text, ne) != q):
        return []
    if prefix and "." in text[j:ne]:
        return []  # RegEnumKey = win32api.RegEnumKey: an attribute path in code, not a parameter
    secret, password, attribute = _secret_field(text[j:ne])
    if not secret:
        return []
    lim = min(len(text), ne + _PAIR_WINDOW)
    line_start = False
    for k in range(ne, lim):
        c = text[k]
        if c >= "\x7f" or c in "{}[]<>" or (c == "-" and line_start):
            return []  # another object, element or YAML list item: not this name's value
        if c == "\n":
            line_start = True
        elif c not in " \t\r":
            line_start = False
        if prefix:
            w = len(value_word)
            hit = text.startswith(value_word, k)
        else:
            w = 5
            hit = c in "vV" and _lower(text[k:k + 5]) == "value"
        if hit and _at(text, k - 1) not in _NAME and _at(text, k + w) not in _NAME:
            v = _field_sep(text, k + w)
            if v >= 0:
                return _assigned(text, v, password, attribute)
    return []


def _user_flag_before(text: str, p: int) -> bool:
    """Whether a ``-u``/``--user`` flag stands before ``p`` on its line (within 200 characters)."""
    k = p
    while k > 0 and p - k < 200 and text[k - 1] in _VALUE:
        k -= 1
    q = text.find("-u", k, p)
    while q != -1 and q + 2 < p:
        if text[q + 2] == " " or text[q + 2] in _ALNUM:
            if _at(text, q - 1) == " " or (_at(text, q - 1) == "-" and _at(text, q - 2) == " "):
                return True
        q = text.find("-u", q + 1, p)
    return False


def _sshpass_before(text: str, p: int) -> bool:
    """Whether the ``-p`` at ``p`` is an option of sshpass: the word ``sshpass`` (or a path
    ending in it) then, within 200 characters, only spaces and ``-v`` flags (verbose, which takes
    no value) before ``p``. An ``-p`` after the command sshpass runs (``ssh -p 2222``) is not."""
    k = p
    while p - k <= 200:
        while k > 0 and text[k - 1] == " ":
            k -= 1
        if k >= 3 and text[k - 3 : k] == " -v":
            k -= 2
            continue
        break
    s = k - 7
    return s >= 0 and text[s:k] == "sshpass" and _at(text, s - 1) not in _NAME


def _short_password_flag(text: str, p: int) -> list[tuple[int, int, str, str]]:
    """``mysql -u root -pVALUE``: a ``-p`` flag with its value attached, after a ``-u`` flag.
    ``-p VALUE`` with a space is not taken: mysql reads that VALUE as the database, and ``-p``
    is also a port, a path or "parents" in other tools. sshpass's ``-p`` always takes the
    password, attached or after spaces (:func:`_sshpass_before`)."""
    if _at(text, p - 1) != " ":
        return []
    if _sshpass_before(text, p):
        return _assigned(text, p + 2, True)
    if _at(text, p + 2) in ("", " ", "-") or not _user_flag_before(text, p):
        return []
    return [f for f in _assigned(text, p + 2, True) if "/" not in text[f[0]:f[1]]]


def _user_password(text: str, j: int) -> list[tuple[int, int, str, str]]:
    """``curl -u user:VALUE`` from ``j`` (after ``-u``/``--user`` and spaces): the password after
    the user name and ``:`` (none when a space follows the colon: curl then prompts)."""
    if _at(text, j) in ("\"", "'"):
        j += 1
    ue = _run_end(text, j, _USER, 65)
    if ue == j or ue - j > 64 or _at(text, ue) != ":" or _at(text, ue + 1) in ("", " ", "\t", ":"):
        return []  # "::": perldoc -u Some::Module names a module
    return _assigned(text, ue + 1, True)


# Shell punctuation that ends one command: redis-cli before it does not own a later -a.
_COMMAND_END = frozenset("|;&<>`()")


def _redis_password_flag(text: str, p: int) -> list[tuple[int, int, str, str]]:
    """``redis-cli -h host -p 6379 -a VALUE``: redis-cli's ``-a`` (its password; spaced only,
    as redis-cli parses it) when the word ``redis-cli`` stands before it on its line, within 200
    characters and with no ``|;&<>`()`` between (``-a`` of another command is not a password)."""
    if _at(text, p - 1) != " " or _at(text, p + 2) != " ":
        return []
    k = p
    while k > 0 and p - k < 200 and text[k - 1] in _VALUE and text[k - 1] not in _COMMAND_END:
        k -= 1
    c = text.find("redis-cli", k, p)
    while c != -1:
        if _at(text, c - 1) not in _NAME and _at(text, c + 9) == " ":
            return _assigned(text, p + 2, True)
        c = text.find("redis-cli", c + 1, p)
    return []


def _flag(text: str, p: int) -> list[tuple[int, int, str, str]]:
    """``--password VALUE``: a command-line flag named like a secret, its value after spaces;
    ``-pVALUE`` (:func:`_short_password_flag`); ``-u``/``--user user:VALUE``
    (:func:`_user_password`); redis-cli's ``-a VALUE`` (:func:`_redis_password_flag`)."""
    if _at(text, p + 1) == "p":
        return _short_password_flag(text, p)
    if _at(text, p + 1) == "a":
        return _redis_password_flag(text, p)
    if _at(text, p + 1) == "u":
        if _at(text, p - 1) != " ":
            return []
        j = p + 2
        while _at(text, j) == " ":
            j += 1
        return _user_password(text, j)
    if _at(text, p + 1) != "-" or _at(text, p - 1) in _NAME:
        return []
    k = p + 2
    e = _run_end(text, k, _NAME, 65)
    if text[k:e] == "user" and _at(text, e) in (" ", "="):
        j = e + 1
        while _at(text, j) == " ":
            j += 1
        return _user_password(text, j)
    if e == k or e - k > 64 or _at(text, e) != " ":
        return []
    secret, password, attribute = _secret_field(text[k:e])
    if not secret:
        return []
    v = e
    while _at(text, v) == " ":
        v += 1
    if _at(text, v) == "-":
        return []  # the next flag, not a value
    return _assigned(text, v, password, attribute)


def _docker_env(text: str, i: int) -> list[tuple[int, int, str, str]]:
    """Dockerfile's legacy ``ENV NAME value`` (no ``=``; the instruction in any case, as Docker
    reads it): at a line's start (after indentation), a name like a secret, spaces or tabs, then
    the value, which is the rest of the line (trailing spaces dropped, and one pair of enclosing
    quotes). ``ENV NAME=value`` and ``ARG NAME=value`` are ordinary assignments."""
    if _lower(text[i : i + 3]) != "env" or _at(text, i + 3) not in (" ", "\t"):
        return []
    k = i
    while k > 0 and text[k - 1] in " \t":
        k -= 1
    if k > 0 and text[k - 1] != "\n":
        return []
    j = i + 3
    while _at(text, j) in (" ", "\t"):
        j += 1
    ne = _run_end(text, j, _NAME, 65)
    if ne == j or ne - j > 64 or _at(text, ne) not in (" ", "\t"):
        return []
    secret, password, attribute = _secret_field(text[j:ne])
    if not secret:
        return []
    v = ne
    while _at(text, v) in (" ", "\t"):
        v += 1
    e = _run_end(text, v, _VALUE, 257)
    if e - v > 256 or _at(text, e) not in ("", "\r", "\n"):
        return []
    while e > v and text[e - 1] == " ":
        e -= 1
    quoted = e - v >= 2 and text[v] in "\"'" and text[e - 1] == text[v]
    if quoted:
        v, e = v + 1, e - 1
    validator = _generic_value(text[v:e], quoted, password, attribute)
    return [(v, e, "GENERIC_SECRET", validator)] if validator else []


# ------------------------------------------------------------------------------ the scan
def _resolve(cands: list[tuple[int, int, str, str]]) -> list[tuple[int, int, str, str]]:
    # Greedy by priority: a candidate is taken unless it overlaps one taken before. Taken ones are
    # disjoint, so of those starting before c's end only the last can reach past c's start (one
    # input can chain thousands of candidates together: "@a.io%" repeated).
    taken: list[tuple[int, int, str, str]] = []  # sorted by start
    starts: list[int] = []
    for c in sorted(set(cands), key=lambda c: (c[0] - c[1], _RANK[c[2]], c[0], c[3])):
        j = bisect_left(starts, c[1])
        if j and taken[j - 1][1] > c[0]:
            continue
        k = bisect_left(starts, c[0])
        starts.insert(k, c[0])
        taken.insert(k, c)
    return taken


def _word_starts(text: str, chars: frozenset[str]) -> Iterator[int]:
    prev_in = False
    for i, c in enumerate(text):
        cur = c in chars
        if cur and not prev_in:
            yield i
        prev_in = cur


def find_spans(text: str) -> list[tuple[int, int, str, str]]:
    """Return ``(start, end, type, validator)`` for every sensitive span, sorted by (start, end).

    Offsets are code points. See :func:`qdrant_guard.detect.find_sensitive` for the contract.

    Raises:
        TypeError: if ``text`` is not a ``str``.
    """
    if not isinstance(text, str):
        raise GuardArgumentTypeError(f"find_spans() argument 'text' must be str, not {type(text).__name__}")
    cands: list[tuple[int, int, str, str]] = []
    floors: list[tuple[int, int]] = []
    for i in _word_starts(text, _DIGITS):
        cands += _chain(text, i)
        floors += _card_floor(text, i)
    for i, c in enumerate(text):
        if c in _LETTERS and _at(text, i + 2) in _DIGITS:
            cands += _iban(text, i)
        if c in "AGSghnprsx" or (c in "Pdkl" and _at(text, i - 1) not in _ALNUM):
            cands += _token(text, i)
    for i in _positions(text, "@"):
        cands += _email(text, i)
    for i in _positions(text, "://"):
        cands += _url(text, i)
    for i in _positions(text, "eyJ"):
        cands += _jwt(text, i)
    for i in _positions(text, _PEM_BEGIN):
        cands += _pem(text, i)
    for i in _word_starts(text, _B64):
        cands += _aws_secret(text, i)
    for i, c in enumerate(text):
        if c in "=:":
            cands += _generic(text, i)
        elif c == "<":
            cands += _xml_element(text, i)
        elif c in "nNkK":
            cands += _pair(text, i)
        elif c == "-":
            cands += _flag(text, i)
        elif c in "Ee":
            cands += _docker_env(text, i)
    return _cover_cards(text, _resolve(cands), floors)
