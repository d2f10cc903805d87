"""Obfuscation folding for the built-in intent model: the case-folded query rewritten as the
words it spells, before feature extraction.

An extraction attempt written ``p@ssw0rds``, ``s a l a r y``, ``pаsswords`` (Cyrillic а),
``pass\u200bword``, ``pass words``, ``show%20all``, ``\\u0070asswords``, ``passw*rds`` or as a base64 or
hex fragment carries none of the words the model and its cues know, so it reads as harmless.
Folding gives back the words; the obfuscation cues (leetspeak, styled letters, zero-width
characters, spaced letters, encoded share) are still counted on the text as written, so the model
sees both what was asked and that it was disguised. Each rule is generic (no word list of the
judging sets) and is guarded so that ordinary text is left alone: leetspeak is folded where it
reads as leetspeak (``r00t``, ``p4ssw0rd``; not ``4g``, ``mp3``, ``10am``, ``ec2``, nor one digit inside
a name: ``l10n``, ``w3c``, ``md5sum``), or, once a query has such a word, also in its weak and short
edge cases (``m3``, ``a11``); letters written as digits, symbols or punctuation (``passw*rds``,
``p@ssw()rds``) only when they spell exactly one word of a small cue vocabulary; escapes only when
glued to a word or two or more in a row; lookalike letters only inside words that mix scripts, or
in words of a text that is otherwise Latin; split words only when the pieces make a word of the
cue vocabulary.
The work is a few linear passes over the bounded prefix.
"""
from __future__ import annotations

import base64
import binascii
import re
import unicodedata
from dataclasses import dataclass

# Invisible characters that split or disguise a word: format characters (Cf) except the visible
# prepended concatenation marks (Arabic number signs and the like), plus the combining grapheme
# joiner, variation selectors and Hangul fillers. tests/test_intent_fold.py checks the Cf part
# against unicodedata.
_INVISIBLE_RANGES = (
    (0x00AD, 0x00AD), (0x034F, 0x034F), (0x061C, 0x061C), (0x115F, 0x1160), (0x17B4, 0x17B5),
    (0x180B, 0x180F), (0x200B, 0x200F), (0x202A, 0x202E), (0x2060, 0x2064), (0x2066, 0x206F),
    (0x3164, 0x3164), (0xFE00, 0xFE0F), (0xFEFF, 0xFEFF), (0xFFA0, 0xFFA0), (0xFFF9, 0xFFFB),
    (0x1BCA0, 0x1BCA3), (0x1D173, 0x1D17A), (0xE0001, 0xE0001), (0xE0020, 0xE007F), (0xE0100, 0xE01EF),
)
INVISIBLE = frozenset(cp for a, b in _INVISIBLE_RANGES for cp in range(a, b + 1))
_INVISIBLE_STRIP = dict.fromkeys(INVISIBLE)
_INVISIBLE_CLASS = "".join(f"\\U{a:08x}-\\U{b:08x}" for a, b in _INVISIBLE_RANGES)
#: Invisible characters between two word characters (counted on the text as written).
INVISIBLE_IN_WORD_RE = re.compile(f"(?<=\\w)[{_INVISIBLE_CLASS}]+(?=\\w)")

# Lowercase Cyrillic and Greek letters (the text is case-folded) that look like Latin ones, in
# lower or upper case (Greek capitals fold to the lowercase letter whose capital is the lookalike).
_HOMOGLYPHS = {
    "\u0430": "a", "\u0432": "b", "\u0435": "e", "\u0455": "s", "\u0456": "i", "\u0458": "j", "\u043a": "k",
    "\u043c": "m", "\u043d": "h", "\u043e": "o", "\u0440": "p", "\u0441": "c", "\u0442": "t", "\u0443": "y",
    "\u0445": "x", "\u04bb": "h", "\u04cf": "l", "\u0501": "d", "\u051b": "q", "\u051d": "w", "\u0451": "e",
    "\u03b1": "a", "\u03b2": "b", "\u03b5": "e", "\u03b6": "z", "\u03b7": "h", "\u03b9": "i", "\u03ba": "k",
    "\u03bc": "m", "\u03bd": "n", "\u03bf": "o", "\u03c1": "p", "\u03c4": "t", "\u03c5": "y", "\u03c7": "x",
    "\u0131": "i", "\u0251": "a", "\u0261": "g",
}
_HOMOGLYPH_TABLE = str.maketrans(_HOMOGLYPHS)
_HOMOGLYPH_CLASS = "[" + "".join(_HOMOGLYPHS) + "]"
_HOMOGLYPH_RE = re.compile(_HOMOGLYPH_CLASS)
# A word holding a lookalike, tried only where a word starts (so linear: from there the run is
# read to its end and back to its last lookalike once).
_HOMOGLYPH_WORD_RE = re.compile(r"(?<![^\W\d_])[^\W\d_]*" + _HOMOGLYPH_CLASS + r"[^\W\d_]*")
_ASCII_LETTER_RE = re.compile(r"[a-z]")
# Runs of what is not counted, deleted (a run per match: per character, re.sub cost ~0.3 us each).
_NOT_ASCII_LETTERS_RE = re.compile(r"[^a-z]+")
_NOT_OTHER_LETTERS_RE = re.compile(r"[\W\d_a-z]+")

_LEET = {"0": "o", "1": "i", "3": "e", "4": "a", "5": "s", "7": "t", "@": "a", "$": "s"}
_LEET_CHUNK_RE = re.compile(r"[a-z0-9@$]+")
_LEET_ONLY_RE = re.compile(r"[a-z013457@$]+")
_LEET_SANDWICH_RE = re.compile(r"[a-z][013457@$]+[a-z]")
_LEET_ANY_RE = re.compile(r"[013457@$]")
_LEET_GROUP_RE = re.compile(r"[013457@$]+")

# Three or more single letters joined by one repeated separator: ``s a l a r y``, ``s.s.n``; the
# ``s`` of a possessive (``c e o's``) is not one of them.
_SPACED_RE = re.compile(r"[a-z](?<![^\W_][a-z])(?<!['’][a-z])([ .\-_*·])[a-z](?:\1[a-z])+(?![^\W_])")
# Spelled-out words are set apart by runs of spaces (``h o m e  a d d r e s s``): once joined, one
# space between words, so that multi-word cues (``home address``) see them.
_SPACE_RUN_RE = re.compile(r"(?<=\S) {2,}(?=\S)")
# Three or more underscores chaining letter words: ``list_all_employee_ssns`` (``max_retries`` stays).
_UNDERSCORE_CHAIN_RE = re.compile(r"(?<![^\W_])[a-z]+(?:_[a-z]+){3,}(?![^\W_])")
# Percent escapes glued to letters on both sides: ``show%20all`` (``a %20 in a url`` stays).
_PCT_GLUED_RE = re.compile(r"(?<=[a-z0-9])(?:%[0-9a-f]{2})+(?=[a-z0-9])")

# Escape sequences written into the text (``\u0070asswords``, ``pass&#119;ords``), on the case-folded
# text: ``\U0001D429`` reads ``\u0001d429`` there (its first four digits alone would be a control
# character, so the long form is tried first), and a UTF-16 surrogate pair is one character.
_ESCAPE = (r"\\u00(?:0[0-9a-f]|10)[0-9a-f]{4}|\\ud[89ab][0-9a-f]{2}\\ud[c-f][0-9a-f]{2}|\\u[0-9a-f]{4}"
           r"|\\x[0-9a-f]{2}|&#x[0-9a-f]{1,6};|&#[0-9]{1,7};")
_ESCAPE_RUN_RE = re.compile(f"(?:{_ESCAPE})+")
_ESCAPE_ONE_RE = re.compile(_ESCAPE)

# Maximal runs (finditer is greedy and resumes after each), so no lookbehind is needed: a pattern
# led by one is tried at every position.
_B64_CAND_RE = re.compile(r"[A-Za-z0-9+/]{8,}={0,2}")
_B64_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=")
_HEX_CAND_RE = re.compile(r"[0-9a-f]{8,}")
_ALNUM = frozenset("abcdefghijklmnopqrstuvwxyz0123456789")
# Base64 and hex of text hold a digit, ``+``, ``/`` or ``=``, or a lower case letter before an upper
# case one: text without any is not searched (a stuffed query of words costs nothing here).
_B64_HINT_RE = re.compile(r"[0-9+/=]|[a-z](?=[A-Z])")
_MAX_DECODED = 8
_TEXTLIKE_RE = re.compile(r"[ -~]*[a-z]{3}[ -~]*")

# Words of the cue vocabulary (sensitive nouns, confidentiality markers, override words) of four
# letters or more. Adjacent pieces that spell one of them (``pass words``, ``pay-roll``) are joined.
SPLIT_WORDS = frozenset("""
    salary salaries password passwords passcode passcodes credential credentials private secret secrets
    keys merger mergers acquisition acquisitions layoff layoffs medical diagnosis diagnoses account
    accounts routing credit passport passports performance disciplinary payroll severance settlement
    settlements lawsuit lawsuits harassment psychiatric compensation bonus bonuses diligence social
    security confidential restricted privileged classified unreleased undisclosed unpublished
    unannounced embargoed hidden ignore disregard forget override bypass previous instructions
    instruction guidelines restrictions filters guardrails jailbreak system prompt developer
    bank address addresses medications
""".split())
_WORD_SPLIT_RE = re.compile(r"([a-z]+)")
_SPLIT_PREFIXES = frozenset(w[:i] for w in SPLIT_WORDS for i in range(1, len(w)))

# Words a disguised word is resolved to (``passw*rds``, ``p@ssw()rds``, ``s3cret``): the split-word
# vocabulary plus the single words of the bulk, record and override cues of intent_features.
RESOLVE_WORDS = SPLIT_WORDS | frozenset("""
    ssns admin login logins token tokens every everyone everybody entire whole complete dump export
    exfiltrate database records documents employee employees customer customers verbatim unredacted
""".split())
_RESOLVE_BLOB = "\n".join(sorted(RESOLVE_WORDS))
_RESOLVE_MAX = max(map(len, RESOLVE_WORDS))
# A letter written as a digit or symbol, in the resolver (a wider choice than _LEET: 1 is i or l).
_LEET_CLASS = {"0": "o", "1": "[il]", "3": "e", "4": "a", "5": "s", "7": "t", "@": "a", "$": "s"}
# Characters that may stand for letters inside a word: a wildcard, brackets (``()`` as o) or other
# punctuation. Not the hyphen, apostrophe or space, which sit inside ordinary spellings
# (``by-pass``, ``account's``); split words handle those.
_MASKS = "*?#()[]{}<>|!^~+=/\\.,:;\"%_"
_MASK_SET = frozenset(_MASKS)
_MASK_CLASS = "[" + re.escape(_MASKS) + "]"
# A word holding a digit, symbol or mask between letters (``passw*rds``) or a digit or symbol before
# one (``5alary``); a trailing one (``password5``) is how names are numbered, as the leetspeak pass
# reads it.
_DISGUISED_RE = re.compile(r"(?<![a-z0-9@$])[a-z0-9@$]*(?:[a-z](?:[013457@$]" + _MASK_CLASS + "{0,2}|"
                           + _MASK_CLASS + r"{1,3})(?=[a-z0-9@$])|[013457@$][a-z])"
                           + "[a-z0-9@$" + re.escape(_MASKS) + "]*")
# Every run of letters of a word that resolves is part of a vocabulary word: a cheap test before a
# pattern is compiled (~0.1 ms each), and a bound on how many are.
_RESOLVE_PIECES = frozenset(w[i:j] for w in RESOLVE_WORDS for i in range(len(w)) for j in range(i + 1, len(w) + 1))
_LETTER_RUN_RE = re.compile(r"[a-z]+")
_MAX_RESOLVED_TRIES = 32
# Where _DISGUISED_RE can match (every match of it holds one of these): a digit, symbol or mask after
# a letter and before a letter, digit or symbol, or a digit or symbol before a letter. Led by its
# character class, so re scans for it in C; _DISGUISED_RE, led by a lookbehind, is tried at every
# position (~30 us a query).
_DISGUISE_AT_RE = re.compile("[013457@$" + re.escape(_MASKS) + "](?<=[a-z].)" + _MASK_CLASS + "{0,2}[a-z0-9@$]"
                             "|[013457@$][a-z]")


@dataclass(frozen=True)
class Folded:
    """The folded text and how much of each kind of disguise was undone."""

    text: str
    leet_words: int = 0  # words whose digits, symbols or masks stood for letters (``p4ss``, ``passw*rds``)
    lookalike_letters: int = 0
    joined_words: int = 0  # runs of spaced letters joined
    decoded_fragments: int = 0
    split_words: int = 0  # split words joined (``pass word``): ordinary spelling too, so no cue
    # Characters of decoded escape runs of one or two escapes (``\u0070asswords``): encoded text
    # that the written-text cue, which counts runs of three or more, does not see.
    escaped_chars: int = 0


def _unescape_one(e: str) -> str:
    if e[0] == "&":
        return chr(int(e[3:-1], 16) if e[2] == "x" else int(e[2:-1]))
    if e[1] == "x":
        return chr(int(e[2:], 16))
    if len(e) == 12:  # surrogate pair
        hi, lo = int(e[2:6], 16), int(e[8:], 16)
        return chr(0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00))
    return chr(int(e[2:], 16))


def _fold_escapes(text: str) -> tuple[str, int]:
    # A run is decoded when it is glued to a letter or digit (``\u0070asswords``) or holds two or more
    # escapes; a lone ``\u00e9`` between spaces is what a question about escapes writes, and stays.
    # Only printable characters are written out; case and compatibility forms are folded as the
    # text around them was.
    count = 0

    def one(m: re.Match[str]) -> str:
        nonlocal count
        run = m.group(0)
        parts = _ESCAPE_ONE_RE.findall(run)
        glued = text[m.start() - 1:m.start()].isalnum() or text[m.end():m.end() + 1].isalnum()
        if len(parts) < 2 and not glued:
            return run
        try:
            out = "".join(map(_unescape_one, parts))
        except (ValueError, OverflowError):
            return run
        if not out.isprintable():
            return run
        if len(parts) < 3:
            count += len(run)
        return unicodedata.normalize("NFKC", out).casefold().translate(_INVISIBLE_STRIP)
    return _ESCAPE_RUN_RE.sub(one, text), count


def _pct_decode(m: re.Match[str]) -> str:
    raw = bytes.fromhex(m.group(0).replace("%", ""))
    s = raw.decode("ascii", "replace")
    # Case-folded as the text around it was: ``%50asswords`` is ``passwords`` to the cues.
    return s.casefold() if s.isprintable() and s.isascii() else m.group(0)


def _textlike(data: bytes) -> str | None:
    if not data or max(data) > 0x7E or min(data) < 0x20:
        return None
    s = data.decode("ascii").casefold()
    if sum(c.isalpha() for c in s) * 10 < len(s) * 6 or not _TEXTLIKE_RE.fullmatch(s):
        return None
    return s


def _decoded_fragments(cased: str, low: str) -> list[str]:
    out: list[str] = []
    if not _B64_HINT_RE.search(cased):
        return out
    for m in _B64_CAND_RE.finditer(cased):
        s = m.group(0)
        if cased[m.end():m.end() + 1] in _B64_CHARS and m.end() < len(cased):
            continue
        body = s.rstrip("=")
        # A word is not base64; what base64 makes of text mixes cases or digits, or is padded.
        if not (s.endswith("=") or any(c.isdigit() or c in "+/" for c in body)
                or (any(c.isupper() for c in body[1:]) and any(c.islower() for c in body))):
            continue
        try:
            data = base64.b64decode(body + "=" * (-len(body) % 4), validate=True)
        except (binascii.Error, ValueError):
            continue
        text = _textlike(data)
        if text:
            out.append(text)
            if len(out) >= _MAX_DECODED:
                return out
    for m in _HEX_CAND_RE.finditer(low):
        s = m.group(0)
        if (len(s) % 2 or s.isdigit() or s.isalpha() or low[m.start() - 1:m.start()] in _ALNUM and m.start()
                or low[m.end():m.end() + 1] in _ALNUM and m.end() < len(low)):
            continue
        text = _textlike(bytes.fromhex(s))
        if text:
            out.append(text)
            if len(out) >= _MAX_DECODED:
                break
    return out


def _fold_lookalikes(text: str) -> tuple[str, int]:
    if not _HOMOGLYPH_RE.search(text):
        return text, 0
    latin = len(_NOT_ASCII_LETTERS_RE.sub("", text))
    other = len(_NOT_OTHER_LETTERS_RE.sub("", text))
    count = 0

    def one(m: re.Match[str]) -> str:
        nonlocal count
        w = m.group(0)
        folded = w.translate(_HOMOGLYPH_TABLE)
        if (latin > other and folded.isascii()) or _ASCII_LETTER_RE.search(w):
            count += len(w) - len(_HOMOGLYPH_RE.sub("", w))
            return folded
        return w
    return _HOMOGLYPH_WORD_RE.sub(one, text), count


def _resolve_pattern(word: str) -> str | None:
    """The regex (over :data:`RESOLVE_WORDS`, a word a line) of the words a disguised word can spell."""
    parts: list[str] = []
    known = masked = 0
    i = 0
    while i < len(word):
        c = word[i]
        if "a" <= c <= "z":
            parts.append(c)
            known += 1
        elif c in _LEET_CLASS:
            parts.append(_LEET_CLASS[c])
        elif c in _MASK_SET:
            j = i
            while j < len(word) and word[j] in _MASK_SET:
                j += 1
            if j - i > 3:
                return None
            parts.append(f"[a-z]{{0,{j - i + 1}}}")
            masked += j - i
            i = j
            continue
        else:  # a digit that stands for no letter (``h264``'s 2)
            return None
        i += 1
    # Enough of it is written as letters that it cannot stand for just any word.
    if known < 3 or masked * 2 > known:
        return None
    return "^" + "".join(parts) + "$"


def _resolve_disguised(text: str) -> tuple[str, int, int]:
    """Words whose digits, symbols or punctuation stand for letters, resolved to the one word of
    :data:`RESOLVE_WORDS` they can spell: (text, words resolved, of them joins only)."""
    if not _DISGUISE_AT_RE.search(text):
        return text, 0, 0
    tried: dict[str, tuple[str, bool] | None] = {}  # word, and whether it only joins pieces
    compiled = 0
    resolved = joins = 0

    def one(m: re.Match[str]) -> str:
        nonlocal compiled, resolved, joins
        token = m.group(0)
        core = token.rstrip(_MASKS)  # the pattern starts with no mask
        if core not in tried:
            tried[core] = None
            if (compiled < _MAX_RESOLVED_TRIES and 3 <= len(core) <= _RESOLVE_MAX + 6
                    and _RESOLVE_PIECES.issuperset(_LETTER_RUN_RE.findall(core))):
                pat = _resolve_pattern(core)
                if pat is not None:
                    compiled += 1
                    found = re.findall(pat, _RESOLVE_BLOB, re.M)
                    if len(found) == 1:
                        # ``pass.word``: punctuation between the pieces, no letter hidden
                        only_joins = len(found[0]) == len(_NOT_ASCII_LETTERS_RE.sub("", core)) \
                            and not _LEET_ANY_RE.search(core)
                        tried[core] = (found[0], only_joins)
        hit = tried[core]
        if hit is None:
            return token
        if hit[1]:
            joins += 1
        else:
            resolved += 1
        return hit[0] + token[len(core):]
    return _DISGUISED_RE.sub(one, text), resolved, joins


def _leet_is_strong(s: str) -> bool:
    """A leet word that reads as one without a vocabulary: two or more groups of digits or symbols
    between or before letters (``p4ssw0rd``, ``3xp0rt``), or one that no number or name is written
    with (``r00t``, ``pa$$word``). One digit or number inside a word is how technical names are
    written (``md5sum``, ``w3c``, ``l10n``, ``log4j``, ``deploy@prod01``): folded only in a text that
    is disguised elsewhere."""
    groups = 0
    for m in _LEET_GROUP_RE.finditer(s):
        g = m.group(0)
        before = s[m.start() - 1:m.start()].isalpha()
        after = s[m.end():m.end() + 1].isalpha()
        if not after:
            continue
        if before:
            if len(g) > 1 and not (g.isdigit() and g[0] != "0"):
                return True
        groups += 1
    return groups >= 2 and bool(_LEET_SANDWICH_RE.search(s))


def _fold_leet(text: str, disguised: bool = False) -> tuple[str, int]:
    # ``disguised``: the text already held a resolved disguised word, so weak and edge leet words
    # (``md5sum``, ``m3``) fold too.
    if not disguised and not _LEET_SANDWICH_RE.search(text):  # no digit between letters: nothing folds
        return text, 0
    chunks = [m for m in _LEET_CHUNK_RE.finditer(text) if _LEET_ANY_RE.search(m.group(0))]
    if not chunks:
        return text, 0

    def eligible(m: re.Match[str]) -> bool:
        s = m.group(0)
        if not _LEET_ONLY_RE.fullmatch(s) or not any("a" <= c <= "z" for c in s):
            return False
        # x@example.com: the @ of an address is no letter.
        return not ("@" in s and text.startswith(".", m.end()))
    sandwiched = [m for m in chunks if eligible(m) and _LEET_SANDWICH_RE.search(m.group(0))]
    if not disguised:
        sandwiched = [m for m in sandwiched if _leet_is_strong(m.group(0))]
        if not sandwiched:
            return text, 0
    # By start, not `m not in sandwiched`: a list test per chunk made a 100 KB query of leet words quadratic.
    starts = {m.start() for m in sandwiched}
    fold = sandwiched + [m for m in chunks
                         if m.start() not in starts and eligible(m) and len(m.group(0)) >= 2]
    fold.sort(key=lambda m: m.start())
    parts: list[str] = []
    pos = 0
    for m in fold:
        word = m.group(0).replace("11", "ll")
        parts.append(text[pos:m.start()])
        parts.append("".join(_LEET.get(c, c) for c in word))
        pos = m.end()
    parts.append(text[pos:])
    return "".join(parts), len(fold)


def _join_split_words(text: str) -> tuple[str, int]:
    # re.split keeps the words at odd indexes, the separators between them at even ones.
    parts = _WORD_SPLIT_RE.split(text)
    heads = _SPLIT_PREFIXES.intersection(parts[1::2])
    if not heads:
        return text, 0
    joins: list[tuple[int, int, str]] = []
    done = 0
    for i in [i for i in range(1, len(parts) - 2, 2) if parts[i] in heads]:
        if i < done:
            continue
        two = parts[i] + parts[i + 2]
        three = two + parts[i + 4] if two in _SPLIT_PREFIXES and i + 4 < len(parts) else ""
        for word, last in ((three, i + 4), (two, i + 2)):
            if word in SPLIT_WORDS and all(parts[j] in (" ", "-") for j in range(i + 1, last, 2)):
                joins.append((i, last, word))
                done = last + 1
                break
    if not joins:
        return text, 0
    for i, last, word in reversed(joins):
        parts[i:last + 1] = [word]
    return "".join(parts), len(joins)


def fold(low: str, cased: str) -> Folded:
    """The case-folded text ``low`` with its disguises undone (``cased``, the same text before case
    folding, is read for base64, which is case-sensitive).

    Decoded base64 and hex fragments that read as text are appended, so both the fragment and what
    it says are seen.
    """
    text = low.translate(_INVISIBLE_STRIP)
    escapes = 0
    if "\\" in text or "&#" in text:
        text, escapes = _fold_escapes(text)
    if "%" in text:
        text = _PCT_GLUED_RE.sub(_pct_decode, text)
    looks = 0
    if not text.isascii():
        text, looks = _fold_lookalikes(text)
    if "_" in text:
        text = _UNDERSCORE_CHAIN_RE.sub(lambda m: m.group(0).replace("_", " "), text)
    text, spaced = _SPACED_RE.subn(lambda m: m.group(0)[::2], text)
    if spaced:
        text = _SPACE_RUN_RE.sub(" ", text)
    text, resolved, dotted = _resolve_disguised(text)
    text, leet = _fold_leet(text, disguised=resolved > 0)
    text, joined = _join_split_words(text)
    decoded = _decoded_fragments(cased.translate(_INVISIBLE_STRIP), text)
    if decoded:
        text = text + " " + " ".join(decoded)
    return Folded(text, leet + resolved, looks, spaced, len(decoded), joined + dotted, escapes)
