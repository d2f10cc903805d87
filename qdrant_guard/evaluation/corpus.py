"""Real text for the evaluation: the stdlib pydoc topics, known-item queries and planted secrets.

Everything here is deterministic given the seed, and uses only the standard library text that
ships with CPython (``pydoc_data.topics``), so every run and every machine sees the same corpus.
"""
from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

__all__ = [
    "load_paragraphs",
    "make_queries",
    "tokenize",
    "is_identifier_token",
    "identifiers_by_case",
    "SECRET_KINDS",
    "SecretCarrier",
    "make_carriers",
]

_WORD = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-]*[A-Za-z0-9_]|[A-Za-z0-9_]")
_SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[A-Z(\"'`])")
STOPWORDS = frozenset(
    """a an and are as at be been but by can could do does for from has have if in into is it its
    may might must no not of on or other such than that the their them then there these they this
    those to was were what when where which while will with would you your also any each more most
    only same so some used using use all one two see following following example""".split()
)


def load_paragraphs(max_docs: int | None = None) -> list[str]:
    """Return the prose paragraphs of ``pydoc_data.topics`` (whitespace-normalised, deduplicated).

    A paragraph is kept when it has at least 15 words, at most 1,500 characters, and at least 85 %
    letters or spaces (code listings and grammar productions are dropped).

    Args:
        max_docs: keep only the first ``max_docs`` paragraphs (in topic-name order).
    """
    from pydoc_data.topics import topics

    seen: set[str] = set()
    out: list[str] = []
    for name in sorted(topics):
        for block in re.split(r"\n\s*\n", topics[name]):
            text = " ".join(block.split())
            if len(text.split()) < 15 or len(text) > 1500 or text in seen:
                continue
            if sum(c.isalpha() or c == " " for c in text) / len(text) < 0.85:
                continue
            seen.add(text)
            out.append(text)
    return out[:max_docs] if max_docs is not None else out


def tokenize(text: str) -> list[str]:
    """Split text into word tokens (letters, digits, ``_``, inner ``.``/``-``), lower-cased."""
    return [m.group(0).lower() for m in _WORD.finditer(text)]


def is_identifier_token(token: str) -> bool:
    """Whether a token is an *identifier* rather than a topic word.

    Identifier tokens name one specific thing rather than a subject: numbers, codes and rare proper
    tokens. From the token alone: anything with a digit (numbers, versions, codes such as ``pep
    572``'s ``572``, ``utf-8``) and code names: anything with ``_`` (``__init__``,
    ``format_spec``) or a dotted name (``sys.path``, ``str.format``). Not identifiers: hyphenated
    English compounds (``built-in``, ``read-only``, which are topic words) and dotted
    abbreviations of single letters (``e.g``, ``i.e``, which are neither). Codes and proper
    tokens that only their case gives away (``TypeError``, ``Unicode``) need the original text:
    :func:`identifiers_by_case`.
    """
    if any(c.isdigit() or c == "_" for c in token):
        return True
    return "." in token and not _is_abbreviation(token)


def identifiers_by_case(texts: Sequence[str], *, rare_fraction: float = 0.02) -> frozenset[str]:
    """Lower-cased tokens that ``texts`` write as codes or as rare proper names.

    Case is lost by :func:`tokenize`, so it is read here from the original texts:

    * **codes**: most occurrences carry an upper-case letter after the first character
      (``TypeError``, ``CPython``, ``ASCII``);
    * **rare proper tokens**: most occurrences that do not start a sentence are capitalised, and
      the token is in at most ``rare_fraction`` of the texts (``Unicode`` in 2 % of the pydoc
      paragraphs is one; ``Python`` in 8 % is the corpus's subject, not an identifier).
    """
    total: Counter[str] = Counter()
    inner_upper: Counter[str] = Counter()
    mid: Counter[str] = Counter()
    mid_capital: Counter[str] = Counter()
    df: Counter[str] = Counter()
    for text in texts:
        seen = set()
        for m in _WORD.finditer(text):
            word, low = m.group(0), m.group(0).lower()
            seen.add(low)
            total[low] += 1
            inner_upper[low] += any(c.isupper() for c in word[1:])
            j = m.start() - 1
            while j >= 0 and text[j].isspace():
                j -= 1
            if j >= 0 and text[j] not in ".!?:":
                mid[low] += 1
                mid_capital[low] += word[0].isupper()
        df.update(seen)
    limit = rare_fraction * len(texts)
    return frozenset(
        w for w in total
        if inner_upper[w] * 2 > total[w]
        or (mid[w] and mid_capital[w] * 2 > mid[w] and df[w] <= limit)
    )


def _is_abbreviation(token: str) -> bool:
    return all(len(part) <= 1 for part in token.split("."))


def is_topic_token(token: str) -> bool:
    """Whether a token is a topic word: 4+ letters, alphabetic apart from inner hyphens
    (``built-in``), not a stopword."""
    letters = token.replace("-", "")
    return len(letters) >= 4 and letters.isalpha() and token not in STOPWORDS


def make_queries(
    paragraphs: Sequence[str], n: int, rng: np.random.Generator, *, max_words: int = 16
) -> list[tuple[str, int]]:
    """Build known-item queries: a keyword-heavy span of one sentence of each target paragraph.

    For each target paragraph (a random sample of ``n``), every sentence of 5+ words is scored by
    the mean IDF of its topic words; the best sentence is kept, and if it is longer than
    ``max_words`` words, its ``max_words``-word window with the largest IDF sum is used.

    Returns:
        ``(query_text, target_paragraph_index)`` pairs.
    """
    df: Counter[str] = Counter()
    for p in paragraphs:
        df.update(set(tokenize(p)))
    n_docs = len(paragraphs)
    idf = {t: math.log((n_docs + 1) / (c + 1)) + 1.0 for t, c in df.items()}

    def weight(word: str) -> float:
        toks = [t for t in tokenize(word) if is_topic_token(t) or is_identifier_token(t)]
        return sum(idf.get(t, 0.0) for t in toks)

    targets = rng.choice(n_docs, size=min(n, n_docs), replace=False)
    out: list[tuple[str, int]] = []
    for t in targets.tolist():
        sentences = [s for s in _SENTENCE.split(paragraphs[t]) if len(s.split()) >= 5]
        if not sentences:
            sentences = [paragraphs[t]]
        best = max(sentences, key=lambda s: sum(weight(w) for w in s.split()) / len(s.split()))
        words = best.split()
        if len(words) > max_words:
            weights = [weight(w) for w in words]
            start = max(
                range(len(words) - max_words + 1), key=lambda i: sum(weights[i : i + max_words])
            )
            words = words[start : start + max_words]
        out.append((" ".join(words), t))
    return out


# --------------------------------------------------------------------------- secrets

_ALNUM = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"


def _ssn(rng: np.random.Generator) -> str:
    while True:
        area = int(rng.integers(1, 900))
        if area != 666:
            break
    return f"{area:03d}-{int(rng.integers(1, 100)):02d}-{int(rng.integers(1, 10000)):04d}"


def _luhn_digit(body: str) -> str:
    total = 0
    for i, ch in enumerate(reversed(body)):
        d = int(ch)
        if i % 2 == 0:
            d *= 2
            if d > 9:
                d -= 9
        total += d
    return str((10 - total % 10) % 10)


def _card(rng: np.random.Generator) -> str:
    body = "4" + "".join(str(int(d)) for d in rng.integers(0, 10, size=14))
    digits = body + _luhn_digit(body)
    return " ".join(digits[i : i + 4] for i in range(0, 16, 4))


def _github_token(rng: np.random.Generator) -> str:
    return "ghp_" + "".join(_ALNUM[int(i)] for i in rng.integers(0, len(_ALNUM), size=36))


#: kind -> (generator of one random value, sentence template with ``{secret}``).
SECRET_KINDS: dict[str, tuple[Callable[[np.random.Generator], str], str]] = {
    "ssn": (_ssn, "The maintainer of this section can be reached by SSN {secret} for payroll."),
    "card": (_card, "Charges for this service go to the credit card {secret} on file."),
    "api_key": (_github_token, "The deploy job authenticates with the token {secret} to publish it."),
}


@dataclass(frozen=True)
class SecretCarrier:
    """One paragraph that carries a planted secret, with the attacker's candidate values.

    Attributes:
        kind: ``"ssn"``, ``"card"`` or ``"api_key"``.
        context: the paragraph text the attacker is assumed to know.
        template: the sentence appended to ``context`` with ``{secret}`` in it.
        candidates: distinct candidate values; the attack is run with each one as the truth.
    """

    kind: str
    context: str
    template: str
    candidates: tuple[str, ...]

    def text(self, secret: str) -> str:
        """The full text with ``secret`` planted."""
        return f"{self.context} {self.template.format(secret=secret)}"


def make_carriers(
    paragraphs: Sequence[str],
    per_kind: int,
    n_candidates: int,
    rng: np.random.Generator,
    *,
    max_chars: int = 320,
) -> list[SecretCarrier]:
    """Pick ``per_kind`` short paragraphs per secret kind and draw ``n_candidates`` values each.

    Short paragraphs (<= ``max_chars``) keep the attacker's 1,000 embeddings per carrier cheap.
    """
    short = [i for i, p in enumerate(paragraphs) if len(p) <= max_chars]
    chosen = rng.choice(short, size=per_kind * len(SECRET_KINDS), replace=False).tolist()
    out: list[SecretCarrier] = []
    for n, kind in enumerate(sorted(SECRET_KINDS)):
        gen, template = SECRET_KINDS[kind]
        for idx in chosen[n * per_kind : (n + 1) * per_kind]:
            values: dict[str, None] = {}
            while len(values) < n_candidates:
                values[gen(rng)] = None
            out.append(SecretCarrier(kind, paragraphs[idx], template, tuple(values)))
    return out
