"""Identifier generalisation: numbers, codes and proper names out of text before it is embedded.

Noise that keeps retrieval useful leaves the identifiers a text names (an account number, an error
code, a person's name) readable from its vector (docs/eval.md). :func:`generalize_identifiers`
replaces them before the embedder sees the text, so the vector does not hold them. The guard does
this on sensitive collections unless their policy sets ``generalize_identifiers = false`` (it
costs recall where queries name identifiers); the stored payload text is not touched. An
identifier that always comes with its subject can still be guessed from the subject, which the
vector keeps.

The rules read one word at a time, with no vocabulary, so they behave the same on every corpus.
A word is a run of letters, digits and ``_`` in any script (``Zoë``, ``Müller``, ``٣٤٥``), with
inner ``.``, ``-``, ``'`` or ``’`` joining parts:

* ``[NUMBER]``: digits and separators only (``42``, ``3.11``, ``2024-05-01``);
* ``[CODE]``: a digit together with letters (``utf-8``, ``A1B2``), a ``_`` (``__init__``,
  ``format_spec``), a dotted name whose parts are not all single letters (``sys.path``; ``e.g``
  stays), or an upper-case letter after the first character (``TypeError``, ``CPython``, ``PEP``);
* ``[NAME]``: a capitalised word of two or more letters that does not start a sentence (``Alice``
  in "ask Alice", ``Unicode`` in "in Unicode strings"; not ``The`` in ". The").

Names are found by their capital letter, so in scripts without letter case (Chinese, Japanese,
Arabic, ...) they are not found; numbers and codes are, in any script.

A sentence starts at the beginning of the text, after ``.``, ``!``, ``?``, ``:`` or a line break,
ignoring spaces and opening quotes or brackets in between. Typed placeholders already in the text
(``[SSN]``, ``[EMAIL]``, ``[NAME]``: the detector types and this module's three) are left as they
are; anything else in brackets (``[0]``, ``[Alice]``, ``[NASA]``) is generalised like any other
word.

Example:
    >>> generalize_identifiers("Raised by sys.path in PEP 572 when Alice calls __init__.")
    'Raised by [CODE] in [CODE] [NUMBER] when [NAME] calls [CODE].'
"""
from __future__ import annotations

import re
from typing import Callable

from ._detect_py import FINDING_TYPES
from .errors import GuardArgumentTypeError

__all__ = ["generalize_identifiers", "drop_identifiers", "identifier_kind", "PLACEHOLDERS"]

#: The placeholders :func:`generalize_identifiers` writes.
PLACEHOLDERS = ("[NUMBER]", "[CODE]", "[NAME]")

_WORD = re.compile(r"\w+(?:[.\-'\u2019]\w+)*")
_OPENERS = "\"'([{\u201c\u2018`"
_SENTENCE_ENDS = ".!?:\n"


def identifier_kind(word: str, *, sentence_start: bool) -> str | None:
    """The placeholder kind of one word (``"NUMBER"``, ``"CODE"``, ``"NAME"``) or ``None``."""
    has_digit = any(c.isdigit() for c in word)
    has_letter = any(c.isalpha() for c in word)
    if has_digit:
        return "CODE" if has_letter or "_" in word else "NUMBER"
    if "_" in word:
        return "CODE"
    if "." in word and not all(len(part) <= 1 for part in word.split(".")):
        return "CODE"
    if any(c.isupper() for c in word[1:]):
        return "CODE"
    if word[0].isupper() and len(word) >= 2 and not sentence_start:
        return "NAME"
    return None


def _starts_sentence(text: str, at: int) -> bool:
    j = at - 1
    while j >= 0 and (text[j] in " \t\r\f\v" or text[j] in _OPENERS):
        j -= 1
    return j < 0 or text[j] in _SENTENCE_ENDS


# The words of the typed placeholders redaction and this module write.
_PLACEHOLDER_WORDS = frozenset(FINDING_TYPES) | {p.strip("[]") for p in PLACEHOLDERS}


def _is_placeholder(text: str, start: int, end: int) -> bool:
    # Only typed placeholders ([SSN], [NUMBER]) are kept: "[Alice]", "[NASA]" or "[4111...]" in
    # brackets are identifiers like any others.
    return (start > 0 and text[start - 1] == "[" and end < len(text) and text[end] == "]"
            and text[start:end] in _PLACEHOLDER_WORDS)


def generalize_identifiers(text: str) -> str:
    """Replace numbers, codes and proper names in ``text`` by ``[NUMBER]``, ``[CODE]``, ``[NAME]``.

    See the module docstring for the rules. Text without identifiers is returned unchanged (the
    same object).
    """
    return _rewrite(text, "generalize_identifiers", lambda kind: f"[{kind}]")


def drop_identifiers(text: str) -> str:
    """Delete the words :func:`generalize_identifiers` would replace, leaving their surroundings.

    Not used by the guard. The evaluation embeds this text as its topic-only reference: what an
    attacker reads from the words a policy shares on purpose, with no trace of the identifiers,
    not even a placeholder (docs/eval.md). Text without identifiers is returned unchanged.
    """
    return _rewrite(text, "drop_identifiers", lambda kind: "")


def _rewrite(text: str, caller: str, replace: Callable[[str], str]) -> str:
    if not isinstance(text, str):
        raise GuardArgumentTypeError(f"{caller}() takes str, not {type(text).__name__}")
    parts: list[str] = []
    last = 0
    for m in _WORD.finditer(text):
        start, end = m.span()
        if _is_placeholder(text, start, end):
            continue
        kind = identifier_kind(m.group(0), sentence_start=_starts_sentence(text, start))
        if kind is None:
            continue
        parts.append(text[last:start])
        parts.append(replace(kind))
        last = end
    if not parts:
        return text
    parts.append(text[last:])
    return "".join(parts)
