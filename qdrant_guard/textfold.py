"""Query text as the repetition rules measure it a second time: folded (case, accents, width,
lookalike letters; :func:`_fold`) and scanned again (:func:`structural_scan`), positions mapped back
through the fold and through a redaction (:func:`redacted_position`), and :func:`is_blank`."""
from __future__ import annotations

import dataclasses
import functools
import re
import unicodedata
from typing import Any, Sequence

import numpy as np

from . import detect as _detect
from .names import toml_key


def redacted_position(position: int, findings: Sequence[_detect.Finding]) -> int:
    """``position`` in a text, as a position in that text with ``findings`` replaced by ``[TYPE]``
    (:func:`~qdrant_guard.detect.replace_findings`); inside a replaced span, its placeholder's start."""
    shift = 0
    for f in findings:
        if position < f.start:
            break
        if position < f.end:
            return f.start + shift
        shift += len(f.type) + 2 - (f.end - f.start)
    return position + shift


_ALNUM = re.compile(r"[^\W_]")  # a character str.isalnum() accepts, found at C speed in a huge text

# The repetition rules, measured again on the text folded (see structural_scan).
_CASELESS_KINDS = frozenset({"repetition", "ngram_run", "glued_repetition"})
# Combining diacritical marks (the blocks for Latin, Greek and Cyrillic, and their supplements):
# what an accent-stripping tokenizer drops after decomposing; dropped wherever they stand.
_DIACRITICS = ((0x0300, 0x036F), (0x1AB0, 0x1AFF), (0x1DC0, 0x1DFF), (0x20D0, 0x20FF), (0xFE20, 0xFE2F))
# Letters of the scripts with case, after NFKD: a nonspacing mark of any block on one of them is
# dropped too (an uncased BERT tokenizer drops every nonspacing mark, so Arabic or Hebrew points on
# Latin letters are the same bypass). Not everywhere: Thai and Devanagari vowel signs are
# nonspacing marks, and dropped from their own letters they would make natural text repeat.
_CASED_LETTERS = (
    (0x41, 0x5A), (0x61, 0x7A), (0xC0, 0x24F), (0x370, 0x3FF), (0x400, 0x52F), (0x531, 0x58F),  # Armenian
    (0x13A0, 0x13FF), (0x1E00, 0x1FFF), (0xAB70, 0xABBF),  # Cherokee and its small letters
)
_MARKS_END = 0x1E950  # every nonspacing mark of Unicode lies below

# Letters that look like a Latin lower case letter (after the lines of Unicode's UTS #39
# confusables, cut down), each pair "letter, Latin letter", keyed on the lower case letter; its
# upper case form maps alike where the two round-trip (so not Greek final sigma, whose lower case
# depends on the next letter, nor dotless i, whose upper case is I). A letter not listed keeps its
# script. Where a script has two lookalikes of one Latin letter both are mapped (Cyrillic н and
# һ to h, в and ь to b, у and ү to y, е and ҽ to e, і and ꙇ to i; Greek ο and σ to o; Armenian ո
# and ռ to n, զ and գ to q): an attacker picks either, so mapping one left the other as a bypass.
# The price: two words of one script that differ only there fold alike (Turkish "sık"/"sik", a
# Kazakh word with н and one with һ), which can only add repeats; measured on natural text in
# docs/security-testing.md ("Lookalike fold 2"). Latin letters that look like another Latin letter
# are mapped too: ı ɩ to i, ɑ to a, ɡ to g, ɣ to y, ʋ to u, ƅ to b, ȷ to j, and the small capitals
# whose shape is the lower case letter's (ᴄ ᴏ ᴜ ᴠ ᴡ ᴢ ꜱ). Not mapped: small capitals shaped like
# a capital (ᴀ ʙ ɪ ...), digits for letters (0/o, 1/l), Greek ς and ϲ (NFKD makes ϲ ς), and
# Hebrew, Arabic, Georgian, Canadian syllabics and other scripts' lookalikes. Mathematical letters,
# fullwidth, circled and letterlike forms need no entry: NFKD makes them ASCII, Greek or ı/ȷ.
_CONFUSABLES = (
    # Cyrillic: the shapes of А В Е К М Н О Р С Т Х in upper case, of а г е о р с у х і ј ѕ ԁ ԛ ԝ ӏ in
    # lower; the second lookalikes һ ь ү ҽ ꙇ
    "аaвbсcгrԁdеeԍgнhіiјjкkӏlмmоoрpԛqѕsтtуyѵvԝwхx" "һhьbүyҽeꙇi"
    # Greek: Α Β Ε Ζ Η Ι Κ Μ Ο Ρ Τ Χ, and α γ ι ν ο ρ υ ω ϳ in lower case; σ (its capital Σ with it:
    # both cases of a letter fold alike)
    "αaβbγyεeζzηhιiκkμmνvοoρpτtυuχxωwϳj" "σo"
    # Armenian: Օ Ս Տ, and ա ց հ ո ք զ օ ս; ռ, գ
    "աwցgհhոnքfզqօoսuտs" "ռnգq"
    # Cherokee (upper case is its usual form; lower case since Unicode 8)
    "ꭰdꭱrꭲtꭵiꭹyꭺaꭻjꭼeꮃwꮇmꮋhꮐgꮓzᏼbꮪsꮩvꮮlꮯcꮲpꮶk"
    # Latin lookalikes of other Latin letters: dotless i, iota, alpha, script g, gamma, v with hook,
    # tone six, dotless j, and the small capitals C O U V W Z S
    "ıiɩiɑaɡgɣyʋuƅbȷjᴄcᴏoᴜuᴠvᴡwᴢzꜱs"
)


@functools.lru_cache(maxsize=1)
def _mark_tables() -> tuple[Any, Any, Any]:
    """``(mark, always, cased)``: lookup tables by code point (the last entry stands for every code
    point from :data:`_MARKS_END` on), built on first use from ``unicodedata`` (about 10 ms)."""
    mark = np.zeros(_MARKS_END + 1, dtype=bool)
    for cp in range(0x300, _MARKS_END):
        mark[cp] = unicodedata.category(chr(cp)) == "Mn"
    always = np.zeros_like(mark)
    for a, b in _DIACRITICS:
        always[a:b + 1] = True
    cased = np.zeros_like(mark)
    for a, b in _CASED_LETTERS:
        cased[a:b + 1] = True
    return mark | always, always, cased


@functools.lru_cache(maxsize=1)
def _confusable_table() -> Any:
    """Code point -> code point of :data:`_CONFUSABLES` in both cases (identity elsewhere), as a
    lookup table up to the highest letter it maps."""
    pairs: dict[str, str] = {}
    for key, latin in zip(_CONFUSABLES[::2], _CONFUSABLES[1::2]):
        pairs[key] = latin
        upper = key.upper()
        if len(upper) == 1 and upper.lower() == key:
            pairs[upper] = latin
    table = np.arange(max(map(ord, pairs)) + 1, dtype="<u4")
    for letter, latin in pairs.items():
        table[ord(letter)] = ord(latin)
    return table


def _unconfused(units: Any) -> Any:
    """``units`` (code points) with each letter of :data:`_CONFUSABLES` made its Latin letter
    (``units`` itself when none is there)."""
    table = _confusable_table()
    inside = units < len(table)
    mapped = table.take(np.where(inside, units, 0))
    change = inside & (mapped != units)
    return np.where(change, mapped, units).astype("<u4") if change.any() else units


def _dropped(units: Any) -> Any:
    """Which of ``units`` (code points of NFKD text) the fold drops: a combining diacritic, or a
    nonspacing mark whose base (the last character before it that is no mark) has case."""
    mark_t, always_t, cased_t = _mark_tables()
    c = np.minimum(units, _MARKS_END)
    mark = mark_t.take(c)
    if not mark.any():
        return mark
    always = always_t.take(c)
    other = mark & ~always
    if not other.any():
        return always
    base = np.maximum.accumulate(np.where(mark, 0, np.arange(len(c))))
    return always | (other & cased_t.take(c.take(base)) & ~mark.take(base))


def _fold(text: str) -> str:
    """``text`` as the repetition rules' second measure reads it: compatibility-decomposed
    (fullwidth and mathematical letters become ASCII ones, ligatures their letters), without
    combining diacritics (nor any nonspacing mark on a Latin, Greek, Cyrillic, Armenian or Cherokee
    letter), Latin lookalikes of other scripts' letters made Latin (:data:`_CONFUSABLES`),
    recomposed (Hangul syllables, kana with voicing marks), in lower case."""
    if text.isascii():
        return text.lower()  # about 1 us for 500 tokens
    decomposed = unicodedata.normalize("NFKD", text)
    units = np.frombuffer(decomposed.encode("utf-32-le", "surrogatepass"), dtype="<u4")
    drop = _dropped(units)
    kept = units[~drop] if drop.any() else units
    # One code point for one, so positions map back as before; before NFC, which composes no
    # Latin letter with what follows it here (a mark after a mapped letter was dropped: its script
    # is cased), and before lower case, which maps both cases of a letter alike.
    latin = _unconfused(kept)
    if latin is not units:  # a letter dropped or mapped
        decomposed = latin.tobytes().decode("utf-32-le", "surrogatepass")
    return unicodedata.normalize("NFC", decomposed).lower()


def _unfolded_position(text: str, position: int) -> int:
    """The index in ``text`` of the character whose fold holds index ``position`` of
    ``_fold(text)`` (computed only for a violation). Exact but where NFC recomposes a character
    the original spelled in parts (a Hangul syllable as jamo): then a few characters late."""
    # Only a prefix long enough to hold ``position`` is mapped, doubled until it does: a violation
    # lies early (the second copy) and mapping all 65,536 characters costs about 80 ms in Python.
    # A prefix ends before a starter, so no canonical reordering crosses its end.
    end = min(len(text), position + 64)
    while True:
        while end < len(text) and unicodedata.combining(unicodedata.normalize("NFKD", text[end])[:1] or " "):
            end += 1
        head = text[:end]
        owners = [i for i, ch in enumerate(head) for _ in unicodedata.normalize("NFKD", ch)]
        units = np.frombuffer(unicodedata.normalize("NFKD", head).encode("utf-32-le", "surrogatepass"), dtype="<u4")
        if len(owners) != len(units):  # a canonical reordering cannot change the count; guard anyway
            return min(position, len(text))
        kept = [owner for owner, gone in zip(owners, _dropped(units).tolist()) if not gone]
        if position < len(kept):
            return kept[position]
        if end >= len(text):
            return len(text)
        end = min(len(text), 2 * end)


def structural_scan(text: str, rules: Any) -> tuple[Any, list[Any]]:
    """The structural scan of query text under ``rules`` (a policy's ``[query]``): the scan's
    result, and its violations with those of the repetition rules (``max_repetition``,
    ``max_ngram_run``, ``max_glued_repetition``) on the text folded (:func:`_fold`) added.

    The scanner compares code points exactly, so copies whose letters change case, take accents
    or turn fullwidth at random (``IgNoRe iGnÓrE ｉgnore ...``) all differ for it, while an
    embedding model whose tokenizer lowers, strips accents (an uncased BERT tokenizer, as
    all-MiniLM-L6-v2 has, does both) or applies NFKC receives the same copy again and again:
    100 such copies passed every rule. So did copies with a few letters swapped for Cyrillic or
    Greek lookalikes, whose word pieces mostly agree; the fold makes those letters Latin. Text
    with lookalike letters (most Cyrillic and Greek text) is always scanned twice. The fold costs about 1 us on 500 ASCII tokens and 20 to
    80 us on 3,500 characters of accented or CJK text, and 20 to 50 ms on 65,536 characters that
    NFKD expands several-fold (U+FDFA, squared katakana; such text passes the default token caps
    only a few thousand characters long); the second scan runs only when the fold changed the
    text and the first scan did not already refuse it. Positions are the original text's."""
    from . import scan as _scan

    result = _scan.scan_query(
        text, max_tokens=rules.max_tokens, max_repetition=rules.max_repetition,
        max_ngram_run=rules.max_ngram_run, encoded_payloads=rules.encoded_payloads,
        max_model_tokens=rules.model_token_cap(), max_glued_repetition=rules.max_glued_repetition,
    )
    violations = list(result.violations)
    if rules.max_repetition is None and rules.max_ngram_run is None and rules.max_glued_repetition is None:
        return result, violations
    if violations and rules.mode == "enforce":
        return result, violations  # refused already: the fold would not change the verdict
    folded = _fold(text)
    if folded == text:
        return result, violations
    # NFKD expands some characters up to 18-fold (U+FDFA): the second scan reads no more than
    # max_chars (or the text's length, if longer), so its cost stays that of a text at the cap.
    folded = folded[:max(len(text), rules.max_chars or 0)]
    found = {v.kind for v in violations}
    caseless = _scan.scan_query(
        folded, max_tokens=None, max_repetition=rules.max_repetition, max_ngram_run=rules.max_ngram_run,
        encoded_payloads=False, max_model_tokens=None, max_glued_repetition=rules.max_glued_repetition,
    )
    for v in caseless.violations:
        if v.kind in _CASELESS_KINDS and v.kind not in found:
            # Per character the fold's lengths add up to the whole fold's, but where the original
            # spelled a composed character in parts (a Hangul syllable as jamo): then the position
            # may be a few characters late.
            at = v.position if text.isascii() else _unfolded_position(text, v.position)
            violations.append(dataclasses.replace(
                v, position=at, detail=v.detail + " (letters compared without case, accents or width)"))
    return result, violations


def is_blank(text: str) -> bool:
    """Whether ``text`` has no letter or digit (empty, whitespace, punctuation, invisible characters):
    it gives the text checks nothing to judge, so it cannot stand for a raw vector's text."""
    return _ALNUM.search(text) is None


# Which policy key (under ``[collections.NAME.query]``) decides each structural violation; the
# characters no key admits are refused whenever the scan runs (``enabled``).
_SIZE_KINDS = {"size_cap": "max_chars", "token_cap": "max_tokens"}
_REPEAT_KINDS = {"repetition": "max_repetition", "ngram_run": "max_ngram_run",
                 "glued_repetition": "max_glued_repetition"}
_ENCODED_KINDS = frozenset({"percent_encoding", "hex_escape", "unicode_escape", "html_entity", "base64_blob",
                            "hex_blob"})


def _policy_key(kind: str, detail: str) -> str | None:
    if kind == "token_cap" and "max_model_tokens" in detail:
        return "max_model_tokens"
    if kind in _ENCODED_KINDS:
        return "encoded_payloads"
    return _SIZE_KINDS.get(kind) or _REPEAT_KINDS.get(kind)


def scan_refusal_text(violations: Sequence[dict[str, Any]], collection: str) -> str:
    """What a refused text failed and how to fix it, for a QUERY_REJECTED message: each violation
    kind once (its first violation's detail and position), what to change in the text, and the
    policy keys under ``[collections.COLLECTION.query]`` that decide those kinds, for a collection
    whose legitimate queries look like this one."""
    firsts: dict[str, dict[str, Any]] = {}
    for v in violations:
        firsts.setdefault(v["kind"], v)
    parts = [f"{k} at {v['position']}: {v['detail']}" for k, v in sorted(firsts.items())]
    fixes = []
    if firsts.keys() & _SIZE_KINDS.keys():
        fixes.append("shorten it")
    if firsts.keys() & _REPEAT_KINDS.keys():
        fixes.append("remove the repeated words")
    if firsts.keys() & _ENCODED_KINDS:
        fixes.append("send the text decoded, without escapes, entities or encoded blobs")
    if firsts.keys() - _SIZE_KINDS.keys() - _REPEAT_KINDS.keys() - _ENCODED_KINDS:
        fixes.append("remove the control, invisible or bidi characters and invalid code points (always refused)")
    keys = sorted({key for k, v in firsts.items() if (key := _policy_key(k, v["detail"])) is not None})
    decided = (f"; if this collection's legitimate queries look like this, the policy's "
               f"[collections.{toml_key(collection)}.query] {', '.join(keys)} decide{'s' if len(keys) == 1 else ''} "
               f"{'it' if len(keys) == 1 else 'them'}") if keys else ""
    return "; ".join(parts) + "; " + ", ".join(fixes) + decided
