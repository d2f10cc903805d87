r"""Pure-Python reference of the structural query scanner: the specification of ``scan_query``.

The native twin (``qdrant_guard._scan``, built from native/scan.c) must return exactly what this module
returns, for every input; tests/test_scan_oracle.py checks that. This module is written to be read,
not to be fast: every rule below is one small, separate step over the text.

Definitions (shared by both twins)
----------------------------------
Input units. A ``str`` is scanned code point by code point and positions are code-point indices. A
``bytes`` object is decoded as strict UTF-8; every byte that does not belong to a well-formed sequence
is one *invalid unit* (Python's ``surrogateescape`` view of it), and positions are byte offsets.

Whitespace tokens. Maximal runs of code points that are not whitespace, where whitespace is exactly
``str.isspace`` (so for ``str`` input ``token_count == len(text.split())``). Invalid bytes and lone
surrogates are token characters. Two tokens are equal when their code points (or bytes) are equal.

``repetition_ratio`` = ``1 - unique_tokens / token_count`` (``0.0`` without tokens).

``ngram_run_ratio``. For ``n`` in 1..8, an *n-gram run* is a maximal stretch of tokens
``t[i:j]`` with ``t[k] == t[k + n]`` for every ``k`` in ``i .. j-n-1`` and ``j - i >= 2n`` (at least two
full copies of the n-gram, immediately adjacent). The longest run wins (ties: the earliest start, then
the smallest ``n``); the ratio is its length divided by ``token_count`` (``0.0`` without any run).
``"a b c a b c a b c"`` is one 3-gram run over all 9 tokens: ratio ``1.0``.

``model_token_estimate``. Per whitespace token: ``ceil(A / 4) + P + N`` where ``A`` counts ASCII
letters and digits, ``P`` other ASCII characters (punctuation, symbols, controls) and ``N`` non-ASCII
code points and invalid bytes. It approximates subword tokenizers (about 4 ASCII letters per token, one
token per punctuation mark or CJK/emoji character) and errs high for non-Latin text; it is not the
count of any real tokenizer.

Violation kinds (``Violation.kind``); rules set to ``None`` are not checked:

- ``token_cap``: more than ``max_tokens`` whitespace tokens (position: the first token over the cap),
  or a ``model_token_estimate`` above ``max_model_tokens`` (position: the token that crosses it).
- ``repetition``: ``repetition_ratio > max_repetition`` (position: the first repeated token).
- ``ngram_run``: ``ngram_run_ratio > max_ngram_run`` (position: the start of the run).
- ``glued_repetition``: a whitespace-free run (a whitespace token) of at least ``GLUED_MIN_RUN`` (64)
  code points whose *glued repetition ratio* is above ``max_glued_repetition`` (position: the start of
  the run; one violation per such run). The ratio is ``matches / length`` for the best period ``p`` in
  ``1 .. min(GLUED_MAX_PERIOD, length // 2)`` (256), where ``matches`` counts the code points equal to
  the one ``p`` before (the most matches wins; ties: the smallest ``p``), except that an ASCII code
  point other than a letter (a digit, punctuation, a symbol) counts only inside a stretch of at least
  ``GLUED_STRETCH`` (8) consecutive matches: the separators and the ``0.`` of a number list, or the
  digits of a small alphabet, recur at a fixed step without any copy of a phrase. ``k`` glued copies of
  a string score ``1 - 1/k``, as ``k`` copies of one word score on ``repetition_ratio``. Units are code points
  (for ``bytes`` input an invalid byte is one unit, as in the ``surrogateescape`` view), not UTF-8
  bytes: Thai or Japanese UTF-8 repeats its lead bytes every 3 bytes whatever the text says. This is
  what sees stuffing without spaces (CJK, or ``"ignorepreviousinstructions"`` glued to itself), which
  is one whitespace token to ``repetition`` and ``ngram_run``.
- ``percent_encoding``: a run of at least ``min_percent_run`` consecutive ``%XX`` (X a hex digit), or a
  shorter run (even one escape) that escapes an RFC 3986 unreserved character (``A-Z a-z 0-9 - . _
  ~``): URIs never need to, so ``123%2D45%2D6789`` is hiding text. ``%20`` alone is not flagged, nor
  is a lone escape that reads as a printf conversion: ``%``, a decimal digit and one of ``a c d e f A
  E F``, with no ASCII letter or digit right before or after it (``'%4d:'``, ``[%2d]``).
- ``hex_escape``: a run of consecutive ``\xXX`` escapes.
- ``unicode_escape``: a run of consecutive ``\uXXXX`` / ``\UXXXXXXXX`` escapes.
- ``html_entity``: a run of consecutive character references: ``&#DIGITS;``, ``&#xHEX;`` or ``&NAME;``
  with NAME in :data:`HTML_ENTITY_NAMES` (a subset of the HTML5 named references, case-sensitive).
- ``hex_blob`` / ``base64_blob``: a maximal run of ``[A-Za-z0-9+/]``. Its hex digits are the run, or
  what follows a ``0x``/``0X`` prefix. ``hex_blob`` when the hex digits number at least
  ``min_blob_len`` with at least one digit and one letter, or decode to printable ASCII (U+0020..U+007E)
  from an even count of at least 16 (24 when all are decimal digits). Otherwise ``base64_blob`` when the
  run has at least ``min_blob_len`` characters with a digit, ``+`` or ``/`` and both upper- and
  lower-case letters, or has at least ``DECODE_MIN`` (12) characters, a length that is not 1 mod 4, is
  not shaped like a word (letters only, and all lower-case, all upper-case, or one capital then
  lower-case: ``enchantments`` decodes to printable bytes) and decodes as base64 to printable ASCII
  (``MTIzLTQ1LTY3ODk`` is ``123-45-6789``). Base64 that decodes to text is flagged from 12 characters
  and hex from 16 digits, whatever ``min_blob_len`` says; words (however long), and other runs of
  letters, hex ids and long numbers that do not decode to text, are not flagged.
- ``control_char``: U+0000..U+001F except TAB, LF, CR; U+007F; U+0080..U+009F.
- ``invalid_utf8`` (bytes input only): bytes outside well-formed UTF-8.
- ``lone_surrogate`` (str input only): U+D800..U+DFFF.
- ``invisible_char``: U+200B, U+200C, U+2060..U+2064, U+206A..U+206F, U+00AD, U+180E; U+FEFF except as the first code point;
  U+200D except inside an emoji ZWJ sequence (after an Extended_Pictographic code point optionally
  followed by emoji modifiers U+1F3FB..U+1F3FF and U+FE0F, and before an Extended_Pictographic code
  point); tag characters U+E0000..U+E007F except the three RGI subdivision flags (England, Scotland,
  Wales: U+1F3F4 + tags + U+E007F); a variation selector (U+FE00..U+FE0F, U+E0100..U+E01EF) that
  directly follows another variation selector (chains of selectors smuggle data; one selector after a
  base character, e.g. VS16 after an emoji, is ordinary text).
- ``bidi_control``: U+202A..U+202E, U+2066..U+2069, U+200E, U+200F, U+061C.

Adjacent flagged code points of the same kind form one violation (``detail`` names the first and the
count); escape kinds report one violation per run. Violations are sorted by
``(position, kind, detail)``. Escapes are matched left to right without overlap, like ``re.finditer``.
"""
from __future__ import annotations

import re
from bisect import bisect_right
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple, Optional, Sequence

if TYPE_CHECKING:
    import numpy as np

from .errors import GuardArgumentTypeError, GuardArgumentValueError

__all__ = ["HTML_ENTITY_NAMES", "KINDS", "ScanResult", "Violation", "scan_query"]


@dataclass(frozen=True, slots=True)
class Violation:
    """One structural problem found in a query.

    Attributes:
        kind: one of :data:`KINDS`.
        position: code-point index (``str`` input) or byte offset (``bytes`` input) where it starts.
        detail: a short human-readable description (counts, the first code point, the limit).
    """

    kind: str
    position: int
    detail: str


@dataclass(frozen=True, slots=True)
class ScanResult:
    """Outcome of :func:`scan_query`.

    Attributes:
        ok: ``True`` when there is no violation.
        violations: violations sorted by ``(position, kind, detail)``.
        token_count: number of whitespace tokens.
        model_token_estimate: the subword-token estimate defined in the module docstring.
        repetition_ratio: ``1 - unique / total`` whitespace tokens (``0.0`` without tokens).
        ngram_run_ratio: share of tokens covered by the longest immediately repeated n-gram run.
    """

    ok: bool
    violations: tuple[Violation, ...]
    token_count: int
    model_token_estimate: int
    repetition_ratio: float
    ngram_run_ratio: float


# The index of a kind is its code in the native scanner (native/scan.h, QG_K_*): keep them in step.
KINDS: tuple[str, ...] = (
    "token_cap", "repetition", "ngram_run", "percent_encoding", "hex_escape", "unicode_escape",
    "html_entity", "base64_blob", "hex_blob", "control_char", "invalid_utf8", "lone_surrogate",
    "invisible_char", "bidi_control", "glued_repetition",
)
(K_TOKEN_CAP, K_REPETITION, K_NGRAM_RUN, K_PERCENT, K_HEX_ESCAPE, K_UNICODE_ESCAPE, K_HTML, K_BASE64,
 K_HEXBLOB, K_CONTROL, K_INVALID_UTF8, K_SURROGATE, K_INVISIBLE, K_BIDI,
 K_GLUED_REPETITION) = range(len(KINDS))

MAX_NGRAM = 8
#: Shortest whitespace-free run, in code points, that ``glued_repetition`` measures (native/scan.h
#: QG_GLUED_MIN_RUN).
GLUED_MIN_RUN = 64
#: Longest period, in code points, that ``glued_repetition`` tries (QG_GLUED_MAX_PERIOD).
GLUED_MAX_PERIOD = 256
#: Shortest stretch of consecutive matches, in code points, inside which an ASCII code point other
#: than a letter counts as a match for ``glued_repetition`` (QG_GLUED_STRETCH).
GLUED_STRETCH = 8

#: HTML5 named character references recognised by ``html_entity`` (sorted by bytes; native/scan.c
#: holds the same list).
HTML_ENTITY_NAMES: tuple[str, ...] = tuple("""
    AElig Aacute Agrave Alpha Beta Dagger Delta Eacute Gamma Hat NewLine Omega Prime Sigma Tab
    aacute acute aelig agrave alpha amp and apos ast asymp auml bdquo beta brvbar bsol bull cap
    ccedil cedil cent clubs colon comma commat copy crarr cup curren dArr dagger darr deg delta
    diams divide dollar eacute egrave empty emsp ensp equals equiv excl exist forall frac12
    frac14 frac34 gamma ge grave gt hArr harr hearts hellip iexcl infin int iquest isin lArr
    laquo larr lbrace lbrack lcub ldquo le lowbar loz lpar lrm lsaquo lsqb lsquo lt macr mdash
    micro midast middot minus nabla nbsp ndash ne not notin ntilde num omega oplus or ordf ordm
    oslash otimes ouml para part percnt period permil perp pi plus plusmn pound prime prod quest
    quot rArr radic raquo rarr rbrace rbrack rcub rdquo reg rlm rpar rsaquo rsqb rsquo sbquo
    sdot sect semi shy sigma sol spades sub sube sum sup sup1 sup2 sup3 supe szlig thinsp times
    trade uarr uml uuml verbar vert yen zwj zwnj
""".split())

# Extended_Pictographic ranges (inclusive), taken from the Unicode emoji data via the `regex`
# package's property tables; native/scan.c holds the same table.
EXTENDED_PICTOGRAPHIC: tuple[tuple[int, int], ...] = (
    (0x000A9, 0x000A9), (0x000AE, 0x000AE), (0x0203C, 0x0203C), (0x02049, 0x02049),
    (0x02122, 0x02122), (0x02139, 0x02139), (0x02194, 0x02199), (0x021A9, 0x021AA),
    (0x0231A, 0x0231B), (0x02328, 0x02328), (0x023CF, 0x023CF), (0x023E9, 0x023F3),
    (0x023F8, 0x023FA), (0x024C2, 0x024C2), (0x025AA, 0x025AB), (0x025B6, 0x025B6),
    (0x025C0, 0x025C0), (0x025FB, 0x025FE), (0x02600, 0x02604), (0x0260E, 0x0260E),
    (0x02611, 0x02611), (0x02614, 0x02615), (0x02618, 0x02618), (0x0261D, 0x0261D),
    (0x02620, 0x02620), (0x02622, 0x02623), (0x02626, 0x02626), (0x0262A, 0x0262A),
    (0x0262E, 0x0262F), (0x02638, 0x0263A), (0x02640, 0x02640), (0x02642, 0x02642),
    (0x02648, 0x02653), (0x0265F, 0x02660), (0x02663, 0x02663), (0x02665, 0x02666),
    (0x02668, 0x02668), (0x0267B, 0x0267B), (0x0267E, 0x0267F), (0x02692, 0x02697),
    (0x02699, 0x02699), (0x0269B, 0x0269C), (0x026A0, 0x026A1), (0x026A7, 0x026A7),
    (0x026AA, 0x026AB), (0x026B0, 0x026B1), (0x026BD, 0x026BE), (0x026C4, 0x026C5),
    (0x026C8, 0x026C8), (0x026CE, 0x026CF), (0x026D1, 0x026D1), (0x026D3, 0x026D4),
    (0x026E9, 0x026EA), (0x026F0, 0x026F5), (0x026F7, 0x026FA), (0x026FD, 0x026FD),
    (0x02702, 0x02702), (0x02705, 0x02705), (0x02708, 0x0270D), (0x0270F, 0x0270F),
    (0x02712, 0x02712), (0x02714, 0x02714), (0x02716, 0x02716), (0x0271D, 0x0271D),
    (0x02721, 0x02721), (0x02728, 0x02728), (0x02733, 0x02734), (0x02744, 0x02744),
    (0x02747, 0x02747), (0x0274C, 0x0274C), (0x0274E, 0x0274E), (0x02753, 0x02755),
    (0x02757, 0x02757), (0x02763, 0x02764), (0x02795, 0x02797), (0x027A1, 0x027A1),
    (0x027B0, 0x027B0), (0x027BF, 0x027BF), (0x02934, 0x02935), (0x02B05, 0x02B07),
    (0x02B1B, 0x02B1C), (0x02B50, 0x02B50), (0x02B55, 0x02B55), (0x03030, 0x03030),
    (0x0303D, 0x0303D), (0x03297, 0x03297), (0x03299, 0x03299), (0x1F004, 0x1F004),
    (0x1F02C, 0x1F02F), (0x1F094, 0x1F09F), (0x1F0AF, 0x1F0B0), (0x1F0C0, 0x1F0C0),
    (0x1F0CF, 0x1F0D0), (0x1F0F6, 0x1F0FF), (0x1F170, 0x1F171), (0x1F17E, 0x1F17F),
    (0x1F18E, 0x1F18E), (0x1F191, 0x1F19A), (0x1F1AE, 0x1F1E5), (0x1F201, 0x1F20F),
    (0x1F21A, 0x1F21A), (0x1F22F, 0x1F22F), (0x1F232, 0x1F23A), (0x1F23C, 0x1F23F),
    (0x1F249, 0x1F25F), (0x1F266, 0x1F321), (0x1F324, 0x1F393), (0x1F396, 0x1F397),
    (0x1F399, 0x1F39B), (0x1F39E, 0x1F3F0), (0x1F3F3, 0x1F3F5), (0x1F3F7, 0x1F3FA),
    (0x1F400, 0x1F4FD), (0x1F4FF, 0x1F53D), (0x1F549, 0x1F54E), (0x1F550, 0x1F567),
    (0x1F56F, 0x1F570), (0x1F573, 0x1F57A), (0x1F587, 0x1F587), (0x1F58A, 0x1F58D),
    (0x1F590, 0x1F590), (0x1F595, 0x1F596), (0x1F5A4, 0x1F5A5), (0x1F5A8, 0x1F5A8),
    (0x1F5B1, 0x1F5B2), (0x1F5BC, 0x1F5BC), (0x1F5C2, 0x1F5C4), (0x1F5D1, 0x1F5D3),
    (0x1F5DC, 0x1F5DE), (0x1F5E1, 0x1F5E1), (0x1F5E3, 0x1F5E3), (0x1F5E8, 0x1F5E8),
    (0x1F5EF, 0x1F5EF), (0x1F5F3, 0x1F5F3), (0x1F5FA, 0x1F64F), (0x1F680, 0x1F6C5),
    (0x1F6CB, 0x1F6D2), (0x1F6D5, 0x1F6E5), (0x1F6E9, 0x1F6E9), (0x1F6EB, 0x1F6F0),
    (0x1F6F3, 0x1F6FF), (0x1F7DA, 0x1F7FF), (0x1F80C, 0x1F80F), (0x1F848, 0x1F84F),
    (0x1F85A, 0x1F85F), (0x1F888, 0x1F88F), (0x1F8AE, 0x1F8AF), (0x1F8BC, 0x1F8BF),
    (0x1F8C2, 0x1F8CF), (0x1F8D9, 0x1F8FF), (0x1F90C, 0x1F93A), (0x1F93C, 0x1F945),
    (0x1F947, 0x1F9FF), (0x1FA58, 0x1FA5F), (0x1FA6E, 0x1FAFF), (0x1FC00, 0x1FFFD),
)
_EP_STARTS = [lo for lo, _ in EXTENDED_PICTOGRAPHIC]

# Tag sequences of the RGI subdivision flags (after U+1F3F4): gbeng, gbsct, gbwls + CANCEL TAG.
RGI_TAG_SEQUENCES: tuple[str, ...] = tuple(
    "".join(chr(0xE0000 + ord(c)) for c in name) + "\U000E007F" for name in ("gbeng", "gbsct", "gbwls")
)

_BIDI = frozenset([0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A)])
# U+2061..U+2064 (invisible operators) and U+206A..U+206F (deprecated format characters) show
# nothing either; U+180B..U+180F are Mongolian variation selectors, which Mongolian text needs.
_ALWAYS_INVISIBLE = frozenset([0x00AD, 0x180E, 0x200B, 0x200C, *range(0x2060, 0x2065), *range(0x206A, 0x2070)])
_ZWJ, _BOM, _VS16 = 0x200D, 0xFEFF, 0xFE0F

_CANDIDATES = re.compile(
    "[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\xad\u061c\u180e\u200b-\u200f\u202a-\u202e\u2060-\u2064"
    "\u2066-\u206f\ufe00-\ufe0f\ufeff\ud800-\udfff\U000e0000-\U000e007f\U000e0100-\U000e01ef]"
)
_TOKEN = re.compile(r"\S+")  # re's \s for str patterns is exactly str.isspace
_PERCENT = re.compile(r"(?:%[0-9A-Fa-f]{2})+")
_HEX_ESCAPE = re.compile(r"(?:\\x[0-9A-Fa-f]{2})+")
_UNICODE_ESCAPE = re.compile(r"(?:\\u[0-9A-Fa-f]{4}|\\U[0-9A-Fa-f]{8})+")
_HTML = re.compile(
    r"(?:&(?:#[0-9]+|#[xX][0-9A-Fa-f]+|" + "|".join(HTML_ENTITY_NAMES) + r");)+"
)
_BLOB = re.compile(r"[A-Za-z0-9+/]+")
_HEX_RUN = re.compile(r"[0-9A-Fa-f]+")
_HEX_PREFIXED = re.compile(r"0[xX][0-9A-Fa-f]+")
# RFC 3986: a URI never needs to escape these, so an escaped one hides text (123%2D45%2D6789).
_UNRESERVED = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
# A printf conversion ('%4d', '%2e') reads as one escape; it does not count as hiding a character
# when no ASCII letter or digit touches it.
_PRINTF = re.compile(r"%[0-9][acdefAEF]")


def _ascii_alnum(u: str, k: int) -> bool:
    return 0 <= k < len(u) and u[k].isascii() and u[k].isalnum()


def _printf_conversion(u: str, start: int, end: int) -> bool:
    """Whether the percent run u[start:end] is a lone printf conversion (see the module docstring)."""
    return (_PRINTF.fullmatch(u, start, end) is not None and not _ascii_alnum(u, start - 1)
            and not _ascii_alnum(u, end))
#: Base64 and hex runs at least this long are decoded, whatever ``min_blob_len`` says.
DECODE_MIN = 12
#: A run shaped like a word (all lower-case, all upper-case, or one capital then lower-case) is
#: never decoded as base64.
_WORD = re.compile(r"[A-Z]?[a-z]+|[A-Z]+")
_B64_VALUE = {c: v for v, c in enumerate(
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/")}


def _printable(raw: bytes) -> bool:
    return all(0x20 <= b <= 0x7E for b in raw)


def _hex_text(digits: str, *, digits_only: bool) -> bool:
    """Whether the hex digits spell printable ASCII: an even length of at least 16 (24 when all
    are decimal digits, so that few long numbers qualify)."""
    if len(digits) % 2 or len(digits) < (24 if digits_only else 16):
        return False
    return _printable(bytes.fromhex(digits))


def _base64_text(run: str) -> bool:
    """Whether a run of the base64 alphabet decodes to printable ASCII (a length of 1 mod 4
    decodes to nothing; bits left over at the end are ignored, as by base64 decoders). A run
    shaped like a word is never decoded: a few English words decode to printable bytes."""
    if len(run) < DECODE_MIN or len(run) % 4 == 1 or _WORD.fullmatch(run):
        return False
    bits = "".join(format(_B64_VALUE[c], "06b") for c in run)
    raw = bytes(int(bits[k:k + 8], 2) for k in range(0, len(bits) - 7, 8))
    return _printable(raw)
_RGI_FLAG = re.compile("\U0001F3F4(" + "|".join(RGI_TAG_SEQUENCES) + ")")


class Rules(NamedTuple):
    """Validated rule values (``None`` switches a rule off)."""

    max_tokens: Optional[int]
    max_repetition: Optional[float]
    max_ngram_run: Optional[float]
    encoded_payloads: bool
    max_model_tokens: Optional[int]
    min_blob_len: Optional[int]
    min_percent_run: Optional[int]
    max_glued_repetition: Optional[float] = None


def _type_name(value: object) -> str:
    return "None" if value is None else type(value).__name__


def check_text(text: object) -> None:
    """Raise ``TypeError`` unless ``text`` is ``str`` or ``bytes``."""
    if not isinstance(text, (str, bytes)):
        raise GuardArgumentTypeError(f"scan_query() argument 'text' must be str or bytes, not {_type_name(text)}")


def _count(name: str, value: object, minimum: int, why: str) -> Optional[int]:
    if value is None:
        return None
    if isinstance(value, bool) or not hasattr(value, "__index__"):
        raise GuardArgumentTypeError(f"scan_query() argument '{name}' must be int or None, not {_type_name(value)}")
    number: int = value.__index__()
    if number < minimum:
        raise GuardArgumentValueError(f"scan_query() argument '{name}' must be >= {minimum} or None{why}, got {number}")
    return number


def _ratio(name: str, value: object) -> Optional[float]:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise GuardArgumentTypeError(
            f"scan_query() argument '{name}' must be a number in [0, 1] or None, not {_type_name(value)}"
        )
    number = float(value)
    if not 0.0 <= number <= 1.0:  # also rejects NaN
        raise GuardArgumentValueError(f"scan_query() argument '{name}' must be in [0, 1] or None, got {value!r}")
    return number


def check_rules(
    max_tokens: object,
    max_repetition: object,
    max_ngram_run: object,
    encoded_payloads: object,
    max_model_tokens: object,
    min_blob_len: object,
    min_percent_run: object,
    max_glued_repetition: object = None,
) -> Rules:
    """Validate and normalise the rule arguments of :func:`scan_query` (both twins call this).

    Raises:
        TypeError: a rule has the wrong type (``bool`` is not accepted as a number).
        ValueError: a rule is out of range; the message names it and the accepted range.
    """
    if not isinstance(encoded_payloads, bool):
        raise GuardArgumentTypeError(
            f"scan_query() argument 'encoded_payloads' must be bool, not {_type_name(encoded_payloads)}"
        )
    return Rules(
        _count("max_tokens", max_tokens, 0, ""),
        _ratio("max_repetition", max_repetition),
        _ratio("max_ngram_run", max_ngram_run),
        encoded_payloads,
        _count("max_model_tokens", max_model_tokens, 0, ""),
        _count("min_blob_len", min_blob_len, 8, " (shorter runs flag ordinary words)"),
        _count("min_percent_run", min_percent_run, 1, ""),
        _ratio("max_glued_repetition", max_glued_repetition),
    )


def _more(count: int) -> str:
    return f" and {count - 1} more" if count > 1 else ""


def _detail(kind: int, count: int, value: int) -> str:
    if kind == K_INVALID_UTF8:
        return f"byte 0x{value:02X}{_more(count)}"
    if kind >= K_CONTROL:
        return f"U+{value:04X}{_more(count)}"
    if kind == K_PERCENT:
        return f"run of {count} %XX escape(s)"
    if kind == K_HEX_ESCAPE:
        return f"run of {count} \\xXX escape(s)"
    if kind == K_UNICODE_ESCAPE:
        return f"run of {count} \\uXXXX/\\UXXXXXXXX escape(s)"
    if kind == K_HTML:
        return f"run of {count} character reference(s)"
    if kind == K_BASE64:
        return f"{count}-character base64-like run"
    return f"{count}-character hex run"


# The wording of the whole-text violations; the native binding calls these too, so the text has one
# source.
def token_cap_detail(token_count: int, max_tokens: Optional[int]) -> str:
    return f"{token_count} whitespace tokens > max_tokens={max_tokens}"


def model_cap_detail(model_tokens: int, max_model_tokens: Optional[int]) -> str:
    return f"model-token estimate {model_tokens} > max_model_tokens={max_model_tokens}"


def repetition_detail(repetition: float, max_repetition: Optional[float]) -> str:
    return f"repetition ratio {repetition:.3f} > max_repetition={max_repetition}"


def ngram_detail(run_n: int, run_length: int, token_count: int, ngram: float,
                 max_ngram_run: Optional[float]) -> str:
    return (f"{run_n}-gram repeated over {run_length} of {token_count} tokens "
            f"(ratio {ngram:.3f} > max_ngram_run={max_ngram_run})")


def glued_detail(length: int, period: int, matches: int, max_glued_repetition: Optional[float]) -> str:
    return (f"{length} code points without whitespace repeat at a period of {period}: ratio "
            f"{matches / length:.3f} > max_glued_repetition={max_glued_repetition}")


def glued_counted(units: "np.ndarray[Any, Any]", p: int) -> int:
    """The matches at period ``p`` that the rule counts: code points equal to the one ``p`` before,
    except that an ASCII code point other than a letter counts only inside a stretch of at least
    ``GLUED_STRETCH`` consecutive matches (native/scan.c QG_GLUED_COUNTED)."""
    import numpy as np

    equal = units[p:] == units[:-p]
    # Each match's stretch: the lengths of the runs of True, repeated over their members.
    edges = np.flatnonzero(np.diff(np.concatenate(([0], equal.view(np.int8), [0]))))
    lengths = edges[1::2] - edges[0::2]
    in_stretch = np.repeat(lengths >= GLUED_STRETCH, lengths)
    c = units[p:][equal]
    letter = ((c | 0x20) >= 0x61) & ((c | 0x20) <= 0x7A)
    return int(((c >= 0x80) | letter | in_stretch).sum())


def glued_best(units: "np.ndarray[Any, Any]") -> tuple[int, int]:
    """``(period, matches)`` of the best period of a run's code points (see the module docstring),
    matches as :func:`glued_counted` counts them; ``(0, 0)`` when none counts at any period in
    range."""
    best_period, best_matches = 0, 0
    for p in range(1, min(GLUED_MAX_PERIOD, len(units) // 2) + 1):
        matches = glued_counted(units, p)
        if matches > best_matches:
            best_period, best_matches = p, matches
    return best_period, best_matches


def glued_runs(u: str, offsets: Sequence[int], cap: float) -> list[tuple[int, int, int, int]]:
    """``(position, length, period, matches)`` of every whitespace-free run of ``u`` (the text as
    code points, ``surrogateescape`` for bytes input) over ``cap``, in text order."""
    import numpy as np  # only when the rule is on: importing this module stays cheap

    found: list[tuple[int, int, int, int]] = []
    for m in _TOKEN.finditer(u):
        run = m.group()
        if len(run) < GLUED_MIN_RUN:
            continue
        # Lone surrogates (and surrogateescape's invalid bytes, U+DC80..U+DCFF) are code points too.
        units = np.frombuffer(run.encode("utf-32-le", "surrogatepass"), dtype="<u4")
        period, matches = glued_best(units)
        if matches / len(run) > cap:
            found.append((offsets[m.start()], len(run), period, matches))
    return found


def assemble(
    rules: Rules,
    marks: list[tuple[int, int, int, int]],
    token_count: int,
    unique_tokens: int,
    first_repeat: int,
    token_cap_at: int,
    model_tokens: int,
    model_cap_at: int,
    run_length: int,
    run_at: int,
    run_n: int,
    glued: Sequence[tuple[int, int, int, int]] = (),
) -> ScanResult:
    """Build the :class:`ScanResult` from raw scan figures (both twins call this).

    Args:
        rules: the validated rules.
        marks: ``(position, kind code, count, value)`` for every character and escape finding.
        token_count: whitespace tokens; unique_tokens: distinct ones.
        first_repeat: position of the first token equal to an earlier one (-1: none).
        token_cap_at: position of token number ``max_tokens`` (-1: not over the cap or rule off).
        model_tokens: the model-token estimate.
        model_cap_at: position of the token where the estimate first exceeds the cap (-1: never).
        run_length, run_at, run_n: the longest n-gram run (tokens covered, position, n); 0 if none.
        glued: ``(position, length, period, matches)`` of every run over ``max_glued_repetition``.
    """
    repetition = 1.0 - unique_tokens / token_count if token_count else 0.0
    ngram = run_length / token_count if run_length else 0.0
    found = [Violation(KINDS[kind], pos, _detail(kind, count, value)) for pos, kind, count, value in marks]
    if token_cap_at >= 0:
        found.append(Violation("token_cap", token_cap_at, token_cap_detail(token_count, rules.max_tokens)))
    if model_cap_at >= 0:
        found.append(Violation(
            "token_cap", model_cap_at, model_cap_detail(model_tokens, rules.max_model_tokens)
        ))
    if rules.max_repetition is not None and repetition > rules.max_repetition:
        found.append(Violation(
            "repetition", first_repeat, repetition_detail(repetition, rules.max_repetition)
        ))
    if rules.max_ngram_run is not None and ngram > rules.max_ngram_run:
        found.append(Violation(
            "ngram_run", run_at, ngram_detail(run_n, run_length, token_count, ngram, rules.max_ngram_run)
        ))
    for position, length, period, matches in glued:
        found.append(Violation(
            "glued_repetition", position, glued_detail(length, period, matches, rules.max_glued_repetition)
        ))
    if len(found) > 1:
        found.sort(key=lambda v: (v.position, v.kind, v.detail))
    return ScanResult(not found, tuple(found), token_count, model_tokens, repetition, ngram)


# ----------------------------------------------------------------------------------------------
# The reference scan


def is_extended_pictographic(cp: int) -> bool:
    """Whether ``cp`` has the Unicode Extended_Pictographic property (table above)."""
    i = bisect_right(_EP_STARTS, cp) - 1
    return i >= 0 and cp <= EXTENDED_PICTOGRAPHIC[i][1]


def _is_selector(cp: int) -> bool:
    return 0xFE00 <= cp <= 0xFE0F or 0xE0100 <= cp <= 0xE01EF


def _zwj_in_emoji(u: str, k: int) -> bool:
    if k + 1 >= len(u) or not is_extended_pictographic(ord(u[k + 1])):
        return False
    j = k - 1
    while j >= 0 and (ord(u[j]) == _VS16 or 0x1F3FB <= ord(u[j]) <= 0x1F3FF):
        j -= 1
    return j >= 0 and is_extended_pictographic(ord(u[j]))


def _char_kind(u: str, k: int, from_bytes: bool, rgi_tags: set[int]) -> Optional[int]:
    cp = ord(u[k])
    if 0xD800 <= cp <= 0xDFFF:
        return K_INVALID_UTF8 if from_bytes else K_SURROGATE
    if cp < 0x20 or 0x7F <= cp <= 0x9F:
        return K_CONTROL  # TAB/LF/CR never reach here (not candidates)
    if cp in _BIDI:
        return K_BIDI
    if cp in _ALWAYS_INVISIBLE:
        return K_INVISIBLE
    if cp == _ZWJ:
        return None if _zwj_in_emoji(u, k) else K_INVISIBLE
    if cp == _BOM:
        return None if k == 0 else K_INVISIBLE
    if 0xE0000 <= cp <= 0xE007F:
        return None if k in rgi_tags else K_INVISIBLE
    if _is_selector(cp):
        return K_INVISIBLE if k > 0 and _is_selector(ord(u[k - 1])) else None
    raise AssertionError(f"unexpected candidate U+{cp:04X}")  # pragma: no cover - regex and rules agree


def _utf8_len(ch: str) -> int:
    cp = ord(ch)
    if cp < 0x80 or 0xDC80 <= cp <= 0xDCFF:  # ASCII, or one invalid byte (surrogateescape)
        return 1
    return 2 if cp < 0x800 else 3 if cp < 0x10000 else 4


def _token_estimate(token: str) -> int:
    letters = sum(1 for ch in token if ch.isascii() and ch.isalnum())
    other_ascii = sum(1 for ch in token if ch.isascii()) - letters
    return -(-letters // 4) + other_ascii + (len(token) - letters - other_ascii)


def _longest_run(ids: list[int]) -> tuple[int, int, int]:
    """Return ``(length, start token, n)`` of the longest n-gram run, or ``(0, 0, 0)``."""
    best = (0, 0, 0)
    for n in range(1, MAX_NGRAM + 1):
        k = n
        while k < len(ids):
            if ids[k] != ids[k - n]:
                k += 1
                continue
            j = k
            while j < len(ids) and ids[j] == ids[j - n]:
                j += 1
            matches = j - k
            if matches >= n:
                candidate = (matches + n, k - n, n)
                if (-candidate[0], candidate[1], candidate[2]) < (-best[0], best[1], best[2]):
                    best = candidate
            k = j
    return best


def scan_query(
    text: str | bytes,
    *,
    max_tokens: Optional[int] = 500,
    max_repetition: Optional[float] = 0.5,
    max_ngram_run: Optional[float] = None,
    encoded_payloads: bool = True,
    max_model_tokens: Optional[int] = None,
    min_blob_len: Optional[int] = 32,
    min_percent_run: Optional[int] = 2,
    max_glued_repetition: Optional[float] = None,
) -> ScanResult:
    """Scan a query for structural attacks before it is embedded.

    Checks size (whitespace tokens and a subword-token estimate), stuffing (repetition and repeated
    n-gram runs), encoded payloads (percent/hex/unicode escapes, HTML character references, base64 and
    hex blobs) and hidden characters (controls, invalid UTF-8, lone surrogates, invisible and bidi
    controls). The exact definitions are in the ``qdrant_guard._scan_py`` module docstring.

    Args:
        text: the query; ``str`` (lone surrogates allowed) or ``bytes`` (invalid UTF-8 allowed).
        max_tokens: cap on whitespace tokens (``None``: no cap).
        max_repetition: cap on ``repetition_ratio``, in [0, 1] (``None``: not checked).
        max_ngram_run: cap on ``ngram_run_ratio``, in [0, 1] (``None``: not checked).
        encoded_payloads: check escapes, character references and blobs.
        max_model_tokens: cap on ``model_token_estimate`` (``None``: no cap).
        min_blob_len: shortest base64/hex run reported by its characters, at least 8; base64
            from 12 characters and hex from 16 digits that decode to text are reported whatever it
            says (``None``: blobs not checked at all).
        min_percent_run: fewest consecutive ``%XX`` reported, at least 1; an escaped unreserved
            character is reported alone (``None``: percent escapes not checked at all).
        max_glued_repetition: cap on the glued repetition ratio of each whitespace-free run of at
            least 64 code points, in [0, 1] (``None``, the default: not checked; a pass of its
            own over the text, so the default call does not pay for it).

    Returns:
        A :class:`ScanResult`; positions are code-point indices for ``str``, byte offsets for ``bytes``.

    Raises:
        TypeError: ``text`` is not ``str``/``bytes``, or a rule has the wrong type.
        ValueError: a rule value is out of range.
    """
    check_text(text)
    rules = check_rules(
        max_tokens, max_repetition, max_ngram_run, encoded_payloads, max_model_tokens, min_blob_len,
        min_percent_run, max_glued_repetition,
    )
    from_bytes = isinstance(text, bytes)
    u = text.decode("utf-8", "surrogateescape") if isinstance(text, bytes) else str(text)
    offsets: Sequence[int]
    if from_bytes:
        byte_offsets = [0]
        for ch in u:
            byte_offsets.append(byte_offsets[-1] + _utf8_len(ch))
        offsets = byte_offsets
    else:
        offsets = range(len(u) + 1)

    tokens = [(m.start(), m.group()) for m in _TOKEN.finditer(u)]
    first_repeat, ids = -1, []
    seen: dict[str, int] = {}
    for start, token in tokens:
        if token in seen and first_repeat < 0:
            first_repeat = offsets[start]
        ids.append(seen.setdefault(token, len(seen)))
    token_cap_at = -1
    if rules.max_tokens is not None and len(tokens) > rules.max_tokens:
        token_cap_at = offsets[tokens[rules.max_tokens][0]]
    model_tokens, model_cap_at = 0, -1
    for start, token in tokens:
        model_tokens += _token_estimate(token)
        cap = rules.max_model_tokens
        if cap is not None and model_cap_at < 0 and model_tokens > cap:
            model_cap_at = offsets[start]
    run_length, run_start, run_n = _longest_run(ids)
    run_at = offsets[tokens[run_start][0]] if run_length else 0

    marks: list[tuple[int, int, int, int]] = []
    rgi_tags = {k for m in _RGI_FLAG.finditer(u) for k in range(m.start(1), m.end(1))}
    open_run: Optional[list[int]] = None  # [start index, last index, kind, count, first value]
    for m in _CANDIDATES.finditer(u):
        k = m.start()
        kind = _char_kind(u, k, from_bytes, rgi_tags)
        if kind is None:
            continue
        if open_run is not None and open_run[2] == kind and open_run[1] == k - 1:
            open_run[1], open_run[3] = k, open_run[3] + 1
            continue
        if open_run is not None:
            marks.append((offsets[open_run[0]], open_run[2], open_run[3], open_run[4]))
        value = ord(u[k]) - 0xDC00 if kind == K_INVALID_UTF8 else ord(u[k])
        open_run = [k, k, kind, 1, value]
    if open_run is not None:
        marks.append((offsets[open_run[0]], open_run[2], open_run[3], open_run[4]))

    if rules.encoded_payloads:
        if rules.min_percent_run is not None:
            for m in _PERCENT.finditer(u):
                run = m.group()
                hidden = any(chr(int(run[k + 1:k + 3], 16)) in _UNRESERVED
                             for k in range(0, len(run), 3))
                if hidden and _printf_conversion(u, m.start(), m.end()):
                    hidden = False
                if len(run) // 3 >= rules.min_percent_run or hidden:
                    marks.append((offsets[m.start()], K_PERCENT, len(run) // 3, 0))
        for m in _HEX_ESCAPE.finditer(u):
            marks.append((offsets[m.start()], K_HEX_ESCAPE, len(m.group()) // 4, 0))
        for m in _UNICODE_ESCAPE.finditer(u):
            marks.append((offsets[m.start()], K_UNICODE_ESCAPE, m.group().count("\\"), 0))
        for m in _HTML.finditer(u):
            marks.append((offsets[m.start()], K_HTML, m.group().count("&"), 0))
        if rules.min_blob_len is not None:
            for m in _BLOB.finditer(u):
                run = m.group()
                long_run = len(run) >= rules.min_blob_len
                if not long_run and len(run) < DECODE_MIN:
                    continue
                digit = any(c.isdigit() for c in run)
                upper = any(c.isupper() for c in run)
                lower = any(c.islower() for c in run)
                hex_digits = run
                if not _HEX_RUN.fullmatch(run) and _HEX_PREFIXED.fullmatch(run):
                    hex_digits = run[2:]
                hex_letter = any(not c.isdigit() for c in hex_digits)
                if _HEX_RUN.fullmatch(hex_digits) and (
                    (len(hex_digits) >= rules.min_blob_len and hex_letter
                     and any(c.isdigit() for c in hex_digits))
                    or _hex_text(hex_digits, digits_only=not hex_letter)
                ):
                    marks.append((offsets[m.start()], K_HEXBLOB, len(run), 0))
                elif (long_run and (digit or "+" in run or "/" in run) and upper and lower) or (
                    _base64_text(run)
                ):
                    marks.append((offsets[m.start()], K_BASE64, len(run), 0))

    glued: list[tuple[int, int, int, int]] = []
    if rules.max_glued_repetition is not None:
        glued = glued_runs(u, offsets, rules.max_glued_repetition)

    return assemble(
        rules, marks, len(tokens), len(seen), first_repeat, token_cap_at, model_tokens, model_cap_at,
        run_length, run_at, run_n, glued,
    )
