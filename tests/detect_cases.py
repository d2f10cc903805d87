"""Shared checks and cases of the card-rule tests (tests/test_glued_card*.py, the detect cases of
tests/test_mutation_session3*.py) and of scripts/glued_card_check.py, scripts/glued_card_fp.py and
scripts/asan_detect.sh.

Every check runs the native kernel and its pure-Python twin through ``tests/oracle.py``'s
``assert_same``: the two must give the same findings, so a case that holds for one holds for both.
The card helpers are a brute-force enumeration written apart from the kernels (:func:`cards`), so
the property "no digit of a card in the clear" is not checked by the code under test.
(tests/detectkit.py is the whole detector's counterpart, for the detector-forms tests.)
"""
from __future__ import annotations

import random

from qdrant_guard.detect import find_sensitive, redact
from tests.oracle import assert_same, both

NATIVE, PYTHON = both("detect")
SEPS = (" ", "-", "--", " - ", " -- ")


def kernel_spans(text: str) -> list[tuple[int, int, str, str]]:
    """The kernel's findings of ``text``, native and twin alike."""
    return assert_same(NATIVE.find_spans, PYTHON.find_spans, text)


def assert_redacts(text: str, redacted: str) -> None:
    """Both kernels agree on ``text`` and ``redact`` gives ``redacted``."""
    kernel_spans(text)
    assert redact(text) == redacted


def typed_values(text: str) -> list[tuple[str, str]]:
    """(type, value) of each ``find_sensitive`` finding, after checking that both kernels agree."""
    kernel_spans(text)
    return [(f.type, text[f.start:f.end]) for f in find_sensitive(text)]


def luhn(d: str) -> bool:
    total = 0
    for k, ch in enumerate(reversed(d)):
        v = int(ch) * (2 if k % 2 else 1)
        total += v - 9 if v > 9 else v
    return total % 10 == 0


def iin(d: str) -> bool:
    p2, p3, p4 = int(d[:2]), int(d[:3]), int(d[:4])
    return (d[0] == "4" or 51 <= p2 <= 55 or 2221 <= p4 <= 2720 or p2 in (34, 37, 65, 36, 38, 62, 50, 56, 57, 58, 67)
            or p4 == 6011 or 644 <= p3 <= 649 or 300 <= p3 <= 305 or 3528 <= p4 <= 3589)


def _grouping(g: list[int]) -> bool:
    return len(g) == 1 or g in ([4, 6, 5], [4, 6, 4]) or (all(x == 4 for x in g[:-1]) and 1 <= g[-1] <= 4)


def cards(text: str) -> list[tuple[int, int]]:
    """Every card of the property, by brute force over runs of whole digit groups."""
    n = len(text)

    def digit(k: int) -> bool:
        return 0 <= k < n and "0" <= text[k] <= "9"

    def letter(k: int) -> bool:
        return 0 <= k < n and text[k].isascii() and text[k].isalpha()

    groups = []
    i = 0
    while i < n:
        j = i
        while digit(j):
            j += 1
        if j > i:
            groups.append((i, j))
        i = j + 1
    out = []
    for a in range(len(groups)):
        for b in range(a, min(a + 5, len(groups))):
            seps = [text[groups[q][1]:groups[q + 1][0]] for q in range(a, b)]
            if seps and not (all(x in SEPS for x in seps) or all(x == "." for x in seps)):
                break
            s, e = groups[a][0], groups[b][1]
            g = [y - x for x, y in groups[a:b + 1]]
            d = "".join(text[x:y] for x, y in groups[a:b + 1])
            if not (13 <= len(d) <= 19 and _grouping(g) and iin(d) and luhn(d)) or letter(s - 1) or letter(e):
                continue
            if len(g) == 1 and ((text[s - 1:s] == "." and digit(s - 2)) or (text[e:e + 1] == "." and digit(e + 1))):
                continue
            out.append((s, e))
    return out


def clear(text: str, spans: list[tuple[int, int, str, str]]) -> list[str]:
    """The cards of ``text`` with a digit no finding covers."""
    covered = {k for s, e, _, _ in spans for k in range(s, e)}
    return [text[s:e] for s, e in cards(text) if any("0" <= text[k] <= "9" and k not in covered for k in range(s, e))]


def card(length: int, lead: str = "4") -> str:
    body = lead + "1" * (length - len(lead) - 1)
    return next(body + c for c in "0123456789" if luhn(body + c))


def grouped(d: str, sep: str) -> str:
    if len(d) == 15 and sep == " ":  # American Express: 4-6-5
        return " ".join((d[:4], d[4:10], d[10:]))
    return sep.join(d[k:k + 4] for k in range(0, len(d), 4))


SEP_POOL = [" ", "-", "--", " - ", " -- ", ".", ":", "/", "+", "(", ")", "x", "é", "\u2014", "  ", ", ", "+1 "]
PIECES = ["555 123-4111", "555.123.", "555 123-", "+1 555 123-", "123-45-6789", "2023-10-15", "0.5", "12:30"]


def random_text(rng: random.Random) -> str:
    """A run of cards (grouped, regrouped, Luhn-valid), glued pieces and digit groups, glued by
    anything from :data:`SEP_POOL`."""
    out = []
    for _ in range(rng.randint(1, 6)):
        r = rng.random()
        if r < 0.35:
            d = card(rng.randint(13, 19), rng.choice(["4", "51", "34", "6011", "36", "3528", "62"]))
            d = d[:len(d) - 3] + "".join(rng.choice("0123456789") for _ in range(2))
            d = next(d + c for c in "0123456789" if luhn(d + c))
            out.append(d if rng.random() < 0.15 else grouped(d, "." if rng.random() < 0.15 else rng.choice(SEPS)))
        elif r < 0.55:
            out.append(rng.choice(PIECES))
        else:
            out.append("".join(rng.choice("0123456789") for _ in range(rng.choice([1, 2, 3, 4, 4, 5, 9, 13, 16]))))
        out.append(rng.choice(SEP_POOL))
    return "".join(out)
