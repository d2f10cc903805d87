"""How a guarded read request is rewritten (:class:`ReadPlan`: what to undo on the way back), and
the two questions the rewrite asks of the caller's arguments: whether Qdrant returns vectors for a
``with_vectors`` value, and whether a ``limit`` may be widened for over-fetching.
"""
from __future__ import annotations

import numbers
from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass
class ReadPlan:
    """How one read request was rewritten, and what to undo on the way back."""

    user_with_payload: Any
    user_with_vectors: Any
    limit: int | None = None
    offset: int = 0
    diversify: bool = False
    strip_vectors: bool = False
    withheld_sources: set[str] = field(default_factory=set)
    """Sources whose budget withheld points of this read (enforce mode)."""
    withheld_ids: set[str] = field(default_factory=set)
    """Normalised ids of the points the budget withheld from this read (enforce mode)."""
    admitted: dict[str, set[str]] = field(default_factory=dict)
    """Source -> normalised ids the budget admitted under it in this read."""
    scored: tuple[tuple[str, ...], str] | None = None
    """Under ``diversity.charge_scores``: the vector names the request scores with and its digest
    (:func:`qdrant_guard.score_charge.score_spec`); None when its scores measure no vector."""
    aliases: dict[str, str] | None = None
    """Alias -> collection, as this read's ``get_aliases`` listed them (None: not listed). For
    this read only: aliases can move between reads."""

    def names_of(self, collection: str) -> frozenset[str]:
        """The names that denote ``collection`` as of this read: itself and its aliases."""
        if not self.aliases:
            return frozenset((collection,))
        return frozenset((collection, *(a for a, c in self.aliases.items() if c == collection)))

    def fresh(self) -> "ReadPlan":
        """The same plan, with nothing recorded as admitted or withheld yet (for a re-run)."""
        # What dataclasses.replace makes (every field passed to __init__, which does nothing else),
        # without its walk over the fields: every read makes one.
        plan = object.__new__(type(self))
        plan.__dict__.update(self.__dict__, withheld_sources=set(), withheld_ids=set(), admitted={})
        return plan


def asks_vectors(value: Any) -> bool:
    """Whether Qdrant returns vectors for ``with_vectors=value``: for anything but None and False.

    Not ``bool(value)``: local mode tests ``is False`` and iterates anything else as vector names,
    and a client validates a list subclass into a plain list, so a sequence that is falsy in Python
    but names vectors (``np.array([""])``, a list subclass whose ``__bool__`` says False) got stored
    vectors back unstripped and uncharged."""
    return value is not None and not (isinstance(value, (bool, np.bool_)) and not value)


def _given_count(value: Any) -> bool:
    """Whether a ``limit``/``group_size`` may be widened for over-fetching: None (Qdrant's default)
    or a positive count. Zero or a negative one goes to Qdrant as given, which refuses it (read as
    "the default", ``limit=0`` returned ten points); so does a numpy integer or a float below 1
    (``np.int64(0)``, ``0.0``), which qdrant-client refuses as it refuses ``0``."""
    # typeshed's numbers.Real declares __lt__ and __le__ only; every Real compares with an int.
    return value is None or isinstance(value, bool) or not isinstance(value, numbers.Real) or value >= 1  # type: ignore[operator]

