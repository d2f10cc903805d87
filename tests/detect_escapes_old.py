"""detect.py's escape handling as of 38e2879, before h-dbmail sped it up: the reference the faster
one must equal (tests/test_escape_reads.py) and the ``old-escapes`` arm of
bench/payload_screen_ab.py. Kept verbatim; install() swaps these four into qdrant_guard.detect
(they look up the rest there), restore() puts the current ones back.
"""
# ruff: noqa
from __future__ import annotations

from collections.abc import Callable

from qdrant_guard import detect as _detect
from qdrant_guard.detect import (_ESCAPE, _ESCAPE_LABELS, _LEGACY_ENTITY, _UNESCAPED, _BLANK_TRIGGERS, Escape, Spans,
                                 _backslashes_before, _surrogate_pair, _unescape, html, bisect_left, bisect_right)

_folded_spans = _detect._folded_spans

def _escapes(text: str, triggers: list[int]) -> list[Escape]:
    """The escapes of ``text``, left to right without overlap (as re.finditer would find them)."""
    out = []
    done = 0
    for i in triggers:
        if i < done or (m := _ESCAPE.match(text, i)) is None:
            continue
        key = m.group()
        ch = _UNESCAPED.get(key, "")
        if ch == "":
            ch = _unescape(m)
            if len(_UNESCAPED) < 4096:  # bounded: escapes are few distinct strings in real text
                _UNESCAPED[key] = ch
        label = _ESCAPE_LABELS[m.lastindex or 0]
        if ch is None and m.lastindex == 8 and (legacy := _LEGACY_ENTITY.match(text, i)):
            m, ch = legacy, html.unescape(legacy.group())  # &nbsp1111; is &nbsp then 1111;
        elif m.lastindex == 3 and ch is not None and "\ud800" <= ch <= "\udbff":
            m, ch = _surrogate_pair(text, m, ch)
        done = m.end()
        if ch is not None:
            out.append((i, done, ch, label))
    return out



def _blanked(text: str, escapes: list[Escape], all_triggers: bool) -> str:
    """``text`` with ``escapes`` (and with ``all_triggers`` every ``%``, ``\\`` and ``&``) made
    spaces: the same offsets, and no base64 or hex run starts inside an escape (the ``20`` of
    ``%20MTIzLTQ1LTY3ODk=`` misaligns the run)."""
    if escapes:
        parts = []
        pos = 0
        for a, b, _, _ in escapes:
            parts.append(text[pos:a])
            parts.append(" " * (b - a))
            pos = b
        parts.append(text[pos:])
        text = "".join(parts)
    return text.translate(_BLANK_TRIGGERS) if all_triggers else text


def _escape_spans(text: str, escapes: list[Escape], find_spans: Callable[[str], Spans]) -> Spans:
    """Findings of the view of ``text`` with ``escapes`` decoded (one character each) and of its
    folded view, mapped back to ``text`` and labelled by the escapes they cover."""
    pieces: list[str] = []
    # Per escape: its index in the view, its span in ``text`` and its label; between escapes the
    # view is ``text`` shifted by what the escapes before saved (memory grows with the escapes only).
    at: list[int] = []
    spans: list[tuple[int, int]] = []
    labels: list[str] = []
    pos = 0
    view = 0
    for a, b, ch, label in escapes:
        pieces.append(text[pos:a] + ch)
        view += a - pos
        at.append(view)
        spans.append((a, b))
        labels.append(label)
        view += 1
        pos = b
    pieces.append(text[pos:])

    def start(k: int) -> int:
        j = bisect_right(at, k) - 1
        if j < 0:
            return k
        return spans[j][0] if at[j] == k else spans[j][1] + (k - at[j] - 1)

    def end(k: int) -> int:  # where the view's character k ends in ``text``
        j = bisect_right(at, k) - 1
        return spans[j][1] if j >= 0 and at[j] == k else start(k) + 1

    # The view is folded too: an escape often stands for what folding sees through (&nbsp;, \u200b).
    decoded = "".join(pieces)
    # A finding that covers no escape is kept too: an escape next to it can be what hid it from
    # the plain scan (\n123-45-6789, {\"api_key\": \"...\"}).
    out: Spans = []
    for s, e, t, v in find_spans(decoded) + _folded_spans(decoded, find_spans):
        covered = set(labels[bisect_left(at, s):bisect_left(at, e)])
        how = "" if not covered else covered.pop() if len(covered) == 1 else "+escapes"
        out.append((start(s), end(e - 1), t, v + how))
    return out


def _whole_escapes(text: str, spans: set[tuple[int, int, str, str]],
                   escapes: list[Escape]) -> set[tuple[int, int, str, str]]:
    """``spans`` with each start inside an escape moved past it where another span starts there
    (its letters are syntax, not text: the decoded view found what follows), else back to the
    escape's start (covering more never leaks); each end inside one moved to its end. A backslash
    after an odd run of backslashes is the second of an escaped one (``\\\\"`` ends a JSON
    string), not an escape's start: a span ending before its quote keeps it."""
    escapes = [x for x in escapes if text[x[0]] != "\\" or _backslashes_before(text, x[0]) % 2 == 0]
    starts = [a for a, _, _, _ in escapes]
    begun = {s for s, _, _, _ in spans}
    out = set()
    for s, e, t, v in spans:
        j = bisect_right(starts, s) - 1
        if j >= 0 and starts[j] < s < escapes[j][1]:
            s = escapes[j][1] if escapes[j][1] < e and escapes[j][1] in begun else starts[j]
        j = bisect_right(starts, e - 1) - 1
        if j >= 0 and starts[j] < e < escapes[j][1]:
            e = escapes[j][1]
        out.add((s, e, t, v))
    return out




_NAMES = ("_escapes", "_blanked", "_escape_spans", "_whole_escapes")
_CURRENT = {n: getattr(_detect, n) for n in _NAMES}


def install() -> None:
    """qdrant_guard.detect runs these four from now on."""
    for n in _NAMES:
        setattr(_detect, n, globals()[n])


def restore() -> None:
    """qdrant_guard.detect runs its own four again."""
    for n, f in _CURRENT.items():
        setattr(_detect, n, f)
