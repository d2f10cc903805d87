"""Card digits next to numbers that h-card5 left open (its closing note).

1. ``4111 1111 1111 1111 555.1234`` was ``[CREDIT_CARD] 555.1234``: after a card and a single
   space, a dotted 3-then-4 group (a phone number's ``NNN.NNNN``) is now taken in, as a dash-joined
   one was; a decimal of another shape (``2.5``, ``12.99``, ``555.12345``) stays apart.
2. ``555 123.4111111111111111`` was no finding at all (the one-group decimal rule read
   ``123.4111111111111111`` as a decimal): a 3-digit integer part joined to a 3-digit group or an
   area code before it by a space or a dash is a phone number's, not a decimal's; one placeholder.
3. ``10.0.0.1.4111111111111111`` was one ``[CREDIT_CARD]``, the address taken in: an IPv4 address
   glued before a card by a dot, with nothing glued before it, is left out, as h-card5 left out the
   mirror tail (``4111 1111 1111 1111.10.0.0.1``).
4. ``+1 4111 1111 1149 9`` was a ``PHONE`` (E.164 reads 8-15 digits) and the number glued after it
   (`` 1-2-3``) stayed in the clear: a card read whole inside a phone finding is a card, from its
   first digit (the country code stays, as in ``+1 4111 1111 1111 1111``, which no phone reading
   takes), to the phone finding's end.
"""
from __future__ import annotations

import random
import re

import pytest

from qdrant_guard.detect import redact
from tests.detect_cases import assert_redacts, card, cards, grouped, iin, kernel_spans, luhn, random_text


@pytest.mark.parametrize(("text", "redacted"), [
    # 1: a dotted 3-4 group after a card and a space
    ("4111 1111 1111 1111 555.1234", "[CREDIT_CARD]"),
    ("pay 4111111111111111 555.1234, thanks", "pay [CREDIT_CARD], thanks"),
    ("4111-1111-1111-1111 555.1234.5", "[CREDIT_CARD]"),
    ("4111 1111 1111 1111 555.1234-5678", "[CREDIT_CARD]"),
    ("é 4111 1111 1111 1111 555.1234 é", "é [CREDIT_CARD] é"),  # code-point offsets in C
    # 2: a phone number's first groups glued to a one-group card by a dot
    ("555 123.4111111111111111", "[CREDIT_CARD]"),
    ("x 555 123.4111111111111111 y", "x [CREDIT_CARD] y"),
    ("555-123.4111111111111111", "[CREDIT_CARD]"),
    ("555 - 123.4111111111111111", "[CREDIT_CARD]"),
    ("(555) 123.4111111111111111", "([CREDIT_CARD]"),
    ("(555)123.4111111111111111", "([CREDIT_CARD]"),
    ("+1 555 123.4111111111111111", "+[CREDIT_CARD]"),  # as +1 555 123-4111-1111-1111-1111
    ("é 555 123.4111111111111111 é", "é [CREDIT_CARD] é"),
    # 3: an IPv4 address before a card stays, as after one
    ("10.0.0.1.4111111111111111", "10.0.0.1.[CREDIT_CARD]"),
    ("ip 192.168.1.20.4111111111111111 x", "ip 192.168.1.20.[CREDIT_CARD] x"),
    ("10.0.0.1.4111.1111.1111.1111", "10.0.0.1.[CREDIT_CARD]"),
    ("10.0.0.1.4111 1111 1111 1111", "10.0.0.1.[CREDIT_CARD]"),
    ("é 10.0.0.1.4111111111111111", "é 10.0.0.1.[CREDIT_CARD]"),
    ("079.123.45.67.4111111111111111", "[CREDIT_CARD]"),  # a leading zero: a phone number's shape
    ("300.1.1.1.4111111111111111", "[CREDIT_CARD]"),  # a part over 255
    ("256.1.1.1.4111111111111111", "[CREDIT_CARD]"),
    ("5.10.0.0.1.4111111111111111", "[CREDIT_CARD]"),  # a fifth group
    ("555-10.0.0.1.4111111111111111", "[CREDIT_CARD]"),  # a dash glues a number before it
    # 4: a card read whole inside a phone finding
    ("+1 4111 1111 1149 9", "+1 [CREDIT_CARD]"),
    ("+1 4111 1111 1149 9 1-2-3", "+1 [CREDIT_CARD]"),
    ("+44 4111 1111 1149 9", "+44 [CREDIT_CARD]"),
    ("(+1) 4111 1111 1149 9", "(+1) [CREDIT_CARD]"),
    ("0044 4111 1111 1149 9", "0044 [CREDIT_CARD]"),
    ("+1-4111-1111-1149-9", "+[CREDIT_CARD]"),  # as +1-4111-1111-1111-1111
    ("+1 4111 1111 1149 9 5", "+1 [CREDIT_CARD]"),  # the phone's last group stays covered
    ("tel +1 4111111111499 ok", "tel +1 [CREDIT_CARD] ok"),
    # and read across the phone finding's end: one placeholder (was [PHONE] [CREDIT_CARD])
    ("+1-4111 1111 1111 1111", "+[CREDIT_CARD]"),
    ("(+1) 4111 1111 1111 1111 3", "(+1) [CREDIT_CARD]"),
    ("0044 4111 1111 1111 14", "0044 [CREDIT_CARD]"),
    ("011 44 4111 1111 1149 9", "011 44 [CREDIT_CARD]"),
])
def test_redacts_as_documented(text, redacted):
    assert_redacts(text, redacted)


@pytest.mark.parametrize(("text", "redacted"), [
    ("4111 1111 1111 1111 2.5", "[CREDIT_CARD] 2.5"),  # decimals stay apart
    ("4111 1111 1111 1111 12.99", "[CREDIT_CARD] 12.99"),
    ("4111 1111 1111 1111 555.12345", "[CREDIT_CARD] 555.12345"),
    ("4111 1111 1111 1111 5555.1234", "[CREDIT_CARD] 5555.1234"),
    ("4111 1111 1111 1111 555.123", "[CREDIT_CARD] 555.123"),
    ("4111 1111 1111 1111 555.1234x", "[CREDIT_CARD] 555.1234x"),  # an identifier
    ("4111 1111 1111 1111  555.1234", "[CREDIT_CARD]  555.1234"),  # two spaces
    ("4111 1111 1111 1111 555.123.4567", "[CREDIT_CARD] [PHONE]"),  # a reader's finding is kept
    ("pi 0.4111111111111111", "pi 0.4111111111111111"),  # a decimal's fraction is no card
    ("12 123.4111111111111111", "12 123.4111111111111111"),  # not 3 and 3 digits
    ("5555 123.4111111111111111", "5555 123.4111111111111111"),
    ("555 1234.4111111111111111", "555 1234.4111111111111111"),
    ("x555 123.4111111111111111", "x555 123.4111111111111111"),  # a letter glued on
    ("0.555 123.4111111111111111", "0.555 123.4111111111111111"),  # a list of decimals
    ("1,555 123.4111111111111111", "1,555 123.4111111111111111"),
    ("555  123.4111111111111111", "555  123.4111111111111111"),  # two spaces
    ("555) 123.4111111111111111", "555) 123.4111111111111111"),  # no area code without its "("
    ("12-4111111111111111@example.com", "[EMAIL]"),  # a card inside another finding than a phone's
    ("+2851-4111 1111 1111 9", "[PHONE] [CREDIT_CARD]"),  # 4 digits before the card: no code alone
    ("+64 28-5111 1111 1111 8", "[PHONE] [CREDIT_CARD]"),
    ("4111111111111111.10.0.0.1", "[CREDIT_CARD].10.0.0.1"),  # h-card5's mirror, unchanged
    ("10.0.0.1", "10.0.0.1"),
    ("+44 20 7946 0958", "[PHONE]"),  # a phone number with no card in it stays one
    ("+14111111111499", "[PHONE]"),  # the card is glued to the country code: no card read
    ("555 123-4111 1111 1111 1111", "[PHONE] [CREDIT_CARD]"),  # a phone read across a card's first group
])
def test_what_stays_apart(text, redacted):
    assert_redacts(text, redacted)


def test_the_card_inside_a_phone_is_typed_a_card():
    assert kernel_spans("+1 4111 1111 1149 9") == [(3, 19, "CREDIT_CARD", "luhn")]
    assert kernel_spans("+1 4111 1111 1149 9 1-2-3") == [(3, 25, "CREDIT_CARD", "luhn")]
    assert kernel_spans("+1 4111 1111 1149 9 5") == [(3, 21, "CREDIT_CARD", "luhn")]
    assert kernel_spans("(+1) 4111 1111 1111 1111") == [(5, 24, "CREDIT_CARD", "luhn")]
    # a phone number read across a card's first group keeps its reading (tests/test_glued_card.py)
    assert kernel_spans("+1 555 123-4111 1111 1111 1111") == [
        (0, 20, "PHONE", "e164"), (21, 30, "CREDIT_CARD", "luhn")]


# --------------------------------------------------------------------- brute force, and grids
_DOT_TAIL = re.compile(r" (\d{3}\.\d{4})(?![0-9A-Za-z])")
_HEAD = re.compile(r"(?:\((\d{3})\)(?:-|--| - | -- | |\.)?|(?<!\d)(\d{3})(?:-|--| - | -- | ))(\d{3})\.(\d{13,19})"
                   r"(?![0-9A-Za-z]|[.:/]\d)")
_IP_HEAD = re.compile(r"(?<![0-9A-Za-z])(?<![0-9][.])(?<!-)(?<! - )(?<! -- )((?:\d{1,3}\.){4})(\d{13,19})(?![0-9A-Za-z]|[.:/]\d)")


def dot_tails(text: str) -> list[tuple[int, int]]:
    """The dotted 3-4 groups after a single space after a card of ``cards()``, by brute force."""
    out = []
    for _, e in cards(text):
        m = _DOT_TAIL.match(text, e)
        if m:
            out.append(m.span(1))
    return out


def phone_heads(text: str) -> list[tuple[int, int]]:
    """The 3-3 or (3) 3 phone groups with a one-group card after a dot: the whole stretch."""
    out = []
    for m in _HEAD.finditer(text):
        s = m.start(2) if m.group(2) else m.start(1) - 1
        before = text[s - 1] if s else ""
        if m.group(2) and (before.isascii() and before.isalpha() or
                           before in ".,:/" and s > 1 and text[s - 2].isdigit()):
            continue
        d = m.group(4)
        if luhn(d) and iin(d):
            out.append((s, m.end(4)))
    return out


def _ipv4(parts: list[str]) -> bool:
    return all(p == "0" or (p[0] != "0" and int(p) <= 255) for p in parts)


def ip_heads(text: str) -> list[tuple[int, int, int]]:
    """(address start, card start, card end) for an IPv4 address glued before a one-group card."""
    out = []
    for m in _IP_HEAD.finditer(text):
        parts = m.group(1)[:-1].split(".")
        d = m.group(2)
        if _ipv4(parts) and luhn(d) and iin(d):
            out.append((m.start(1), m.start(2), m.end(2)))
    return out


# not after a number and a space: "+1 0044 4111 1111 1111 1111" is "+1" and a national number a
# phone reading takes across the card's first group, as "555 123-4111 ..." keeps its [PHONE]
_CODE = re.compile(r"(?<![0-9A-Za-z+(])(?<![0-9] )(?:\+\d{1,3}|\(\+\d{1,3}\)|00\d{2})[ -]$")


def code_cards(text: str) -> list[tuple[int, int]]:
    """The cards of ``cards()`` right after a country code (``+1 ``, ``(+44) ``, ``0044 ``)."""
    return [(s, e) for s, e in cards(text) if _CODE.search(text, 0, s)]


def card6_clear(text: str, spans: list[tuple[int, int, str, str]]) -> list[str]:
    """Digits of the shapes above in the clear, or an IPv4 address before a card taken into a finding.

    A dotted tail counts only after a card whose last digit a CREDIT_CARD finding covers, up to the
    first finding that starts in it (as tests/test_glued_card5.py's ``tails_clear``)."""
    covered = {k for s, e, _, _ in spans for k in range(s, e)}
    carded = {k for s, e, t, _ in spans if t == "CREDIT_CARD" for k in range(s, e)}
    runs = [(a, min([s for s, _, _, _ in spans if a <= s < b] + [b])) for a, b in dot_tails(text) if a - 2 in carded]
    out = [text[a:b] for a, b in runs + phone_heads(text)
           if any("0" <= text[k] <= "9" and k not in covered for k in range(a, b))]
    for s, e in code_cards(text):
        if any("0" <= text[k] <= "9" and k not in carded for k in range(s, e)):
            out.append("card:" + text[s:e])
    for a, s, e in ip_heads(text):
        if any(k in covered for k in range(a, s)) or any(k not in carded for k in range(s, e)):
            out.append("ip:" + text[a:e])
    return out


def card6_text(rng: random.Random) -> str:
    """A random text of the four shapes, glued to noise."""
    out = []
    for _ in range(rng.randint(1, 4)):
        out.append(random_text(rng) if rng.random() < 0.3 else rng.choice(["", " ", "x", "1.", "0.", "-"]))
        d = card(rng.randint(13, 19), rng.choice(["4", "51", "6011"]))
        d = d[:-3] + "".join(rng.choice("0123456789") for _ in range(2))
        d = next(d + c for c in "0123456789" if luhn(d + c))
        shape = rng.random()
        if shape < 0.3:
            out.append(rng.choice(["555 123.", "555-123.", "(555) 123.", "(555)123.", "55 123.", "+1 555 123."]) + d)
        elif shape < 0.5:
            out.append(rng.choice(["10.0.0.1.", "192.168.1.20.", "300.1.1.1.", "010.1.1.1.", "5.1.2.3.4."]) + d)
        elif shape < 0.7:
            short = card(rng.choice([13, 14, 15, 16]), rng.choice(["4", "51"]))
            out.append(rng.choice(["+1 ", "+44 ", "(+1) ", "0044 ", "+1-"]) + grouped(short, rng.choice([" ", "-"])))
        else:
            out.append(grouped(d, rng.choice([" ", "-", "."])) if rng.random() < 0.7 else d)
        out.append(rng.choice([" 555.1234", " 55.1234", " 555.12345", " 2.5", " 555.1234x", ".10.0.0.1", " 1-2-3", ""]))
        out.append(rng.choice([" ", "", "-5", ".5", "x", "."]))
    return "".join(out)


@pytest.mark.parametrize("tail", [" 555.1234", " 555.1234.5", " 555.1234-1", " 123.4567"])
@pytest.mark.parametrize("sep", [" ", "-", "--", "."])
@pytest.mark.parametrize("length", [13, 16, 19])
def test_a_dotted_3_4_group_after_a_card_keeps_no_digit_in_the_clear(tail, sep, length):
    text = f"x {grouped(card(length), sep)}{tail} y"
    kernel_spans(text)
    assert redact(text) == "x [CREDIT_CARD] y", text


@pytest.mark.parametrize("head", ["555 123.", "555-123.", "555--123.", "555 -- 123.", "(555) 123.", "(555)-123.",
                                  "(555).123.", "1-555-123."])
@pytest.mark.parametrize("length", [13, 16, 19])
def test_a_phone_glued_to_a_one_group_card_keeps_no_digit_in_the_clear(head, length):
    text = f"q {head}{card(length)} r"
    spans = kernel_spans(text)
    covered = {k for s, e, _, _ in spans for k in range(s, e)}
    assert [k for k, ch in enumerate(text) if ch.isdigit() and k not in covered] == [], (text, spans)
    assert sum(t == "CREDIT_CARD" for _, _, t, _ in spans) == 1, spans


@pytest.mark.parametrize("ip", ["10.0.0.1", "0.0.0.0", "255.255.255.255", "192.168.1.20", "8.8.8.8"])
@pytest.mark.parametrize("length", [13, 16, 19])
def test_an_ipv4_address_before_a_card_stays(ip, length):
    d = card(length)
    text = f"host {ip}.{d} ok"
    assert kernel_spans(text) == [(6 + len(ip), 6 + len(ip) + length, "CREDIT_CARD", "luhn")]


@pytest.mark.parametrize("prefix", ["+1 ", "+44 ", "(+1) ", "(+44) ", "0044 ", "tel +1 "])
@pytest.mark.parametrize("sep", [" ", "-"])
@pytest.mark.parametrize("length", [13, 14])
def test_a_card_inside_a_phone_finding_is_a_card(prefix, sep, length):
    d = card(length)
    text = f"{prefix}{grouped(d, sep)}"
    spans = kernel_spans(text)
    assert [t for _, _, t, _ in spans] == ["CREDIT_CARD"], (text, spans)
    s, e, _, _ = spans[0]
    assert e == len(text) and re.sub(r"\D", "", text[s:e]).endswith(d) and len(re.sub(r"\D", "", text[:s])) <= 4


def test_random_texts_agree_and_keep_no_digit_in_the_clear():
    rng = random.Random(20261208)
    seen = 0
    for _ in range(3000):
        text = card6_text(rng)
        spans = kernel_spans(text)
        seen += len(dot_tails(text)) + len(phone_heads(text)) + len(ip_heads(text)) + len(code_cards(text))
        assert card6_clear(text, spans) == [], (text, spans)
    assert seen > 1000  # the texts hold the shapes, not only noise
