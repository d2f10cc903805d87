"""Planted identifiers: numbers, codes and names that carry no topic, for the inversion attack.

The corpus's own identifier tokens (``TypeError``, ``__getitem__``, ``3.7``) name what their
paragraph is about, so an attacker infers them from the topic even when the vector does not hold
them. Private identifiers (an account number, a case code, a customer's name) are not like that:
any paragraph could carry any of them. To measure whether a vector leaks *those*, each paragraph
gets one sentence naming one number, one code and one name, each drawn uniformly from a small
pool, independently of the paragraph and of each other. The pools are small so that every
identifier occurs in enough training texts for the attacker to learn it; knowing the topic tells
the attacker nothing about which ones a paragraph carries, so the prior-only baseline is exactly
what an attacker without the vector can do.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ..errors import GuardArgumentValueError

__all__ = ["PlantedIdentifiers", "plant_identifiers", "SURNAMES", "TEMPLATES"]

#: Uncommon surnames (none occurs in the pydoc text), the planted proper names.
SURNAMES: tuple[str, ...] = (
    "Okafor", "Lindqvist", "Nakamura", "Abernathy", "Castellanos", "Dubrovsky", "Haverford",
    "Iwasaki", "Kowalczyk", "Marchetti", "Oyelaran", "Petrovna", "Quintero", "Rasmussen", "Szabo",
    "Thibodeaux", "Valdivia", "Whitcombe", "Yilmaz", "Zeleny", "Achterberg", "Brannigan",
    "Chukwuma", "Delacroix",
)

#: The planted sentence, with ``{code}``, ``{name}`` and ``{number}``; drawn per paragraph.
TEMPLATES: tuple[str, ...] = (
    "Ticket {code} was filed by {name} against account {number}.",
    "The change {code} was approved by {name} for customer {number}.",
    "Account {number} belongs to {name}, see case {code}.",
    "Case {code}: contact {name} about order {number}.",
)

_CODE_LETTERS = "ABCDEFGHJKLMNPQRSTUVWXYZ"


@dataclass(frozen=True)
class PlantedIdentifiers:
    """Paragraphs with planted identifiers.

    Attributes:
        texts: each paragraph followed by its planted sentence.
        words: every planted identifier, lower-cased as the attack's tokenizer yields it.
        kinds: ``"number"``, ``"code"`` or ``"name"`` for each of ``words``.
        planted: per text, the three words planted in it.
    """

    texts: tuple[str, ...]
    words: tuple[str, ...]
    kinds: tuple[str, ...]
    planted: tuple[tuple[str, str, str], ...]


def plant_identifiers(paragraphs: Sequence[str], rng: np.random.Generator, *, pool: int = 20) -> PlantedIdentifiers:
    """Append one sentence naming a random number, code and name to each paragraph.

    Args:
        paragraphs: the corpus.
        rng: draws the pools and each paragraph's identifiers and template.
        pool: identifiers per kind (at most ``len(SURNAMES)``); each occurs in about
            ``len(paragraphs) / pool`` texts.
    """
    if not 2 <= pool <= len(SURNAMES):
        raise GuardArgumentValueError(f"pool must be between 2 and {len(SURNAMES)}, got {pool}")
    numbers = [str(int(n)) for n in rng.choice(np.arange(100_000, 1_000_000), size=pool, replace=False)]
    codes: list[str] = []
    while len(codes) < pool:
        code = "".join(rng.choice(list(_CODE_LETTERS), size=3)) + f"-{int(rng.integers(1000, 10_000))}"
        if code not in codes:
            codes.append(code)
    names = [SURNAMES[int(i)] for i in rng.choice(len(SURNAMES), size=pool, replace=False)]
    texts: list[str] = []
    planted: list[tuple[str, str, str]] = []
    for paragraph in paragraphs:
        n, c, m, t = (int(x) for x in (rng.integers(pool), rng.integers(pool), rng.integers(pool),
                                       rng.integers(len(TEMPLATES))))
        sentence = TEMPLATES[t].format(code=codes[c], name=names[m], number=numbers[n])
        texts.append(f"{paragraph} {sentence}")
        planted.append((numbers[n], codes[c].lower(), names[m].lower()))
    words = tuple(numbers) + tuple(c.lower() for c in codes) + tuple(m.lower() for m in names)
    kinds = ("number",) * pool + ("code",) * pool + ("name",) * pool
    return PlantedIdentifiers(tuple(texts), words, kinds, tuple(planted))
