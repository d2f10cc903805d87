"""Names (agent ids, boundaries, collections, vectors, models) as messages quote them.

A name is the caller's text: it may hold a newline, a carriage return or an escape sequence
(``"\\x1b[31m"``), which printed bare would start a new line in a log or a terminal, overwrite the
one before or recolour what follows. Each helper keeps a printable name as it is and spells any
other character escaped, so a message stays one line and shows the name exactly.
"""
from __future__ import annotations

import json
import re
import shlex
import unicodedata
from urllib.parse import urlsplit, urlunsplit

__all__ = ["folded_name", "path_segment_name", "shell_quote", "shown", "shown_url", "toml_key", "toml_str", "unprintable_char"]

_PLAIN = re.compile(r"[^\\'\"]*")


def _escaped(text: str) -> str:
    """``text`` with each character ``str.isprintable`` refuses (control and format characters,
    line and paragraph separators, surrogates; not the space) written as a backslash escape, and
    backslashes and single quotes escaped: the inside of bash's ``$'...'`` quotes (a character from
    U+0080 to U+00FF as ``\\u00XX``, which bash writes in UTF-8; its ``\\xHH`` is the one byte, which is
    how U+DC80..U+DCFF, the bytes of a name that is not UTF-8 as Python reads them, are written)."""
    out = []
    for ch in text:
        if ch in "\\'":
            out.append("\\" + ch)
        elif ch.isprintable():
            out.append(ch)
        elif ch in "\n\r\t":
            out.append({"\n": "\\n", "\r": "\\r", "\t": "\\t"}[ch])
        elif ord(ch) < 0x80:
            out.append(f"\\x{ord(ch):02x}")  # bash's \xHH is a byte: the character only below 0x80
        elif 0xDC80 <= ord(ch) <= 0xDCFF:
            # Python reads a byte of an argument that is not UTF-8 as U+DC80..U+DCFF (surrogateescape),
            # as a local-mode collection directory's name; bash's \uDCXX would write other bytes.
            out.append(f"\\x{ord(ch) - 0xDC00:02x}")
        elif ord(ch) < 0x10000:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(f"\\U{ord(ch):08x}")
    return "".join(out)


def unprintable_char(name: str) -> str | None:
    """The first character of ``name`` that ``str.isprintable`` refuses, spelt escaped with its
    code point and index (``'\\n' (U+000A) at index 3``), or None when every character is printable.

    Refused: C0 and C1 controls, format characters (bidirectional overrides, zero-width joiners),
    line and paragraph separators, spaces other than U+0020, surrogates and unassigned code points.
    """
    for i, ch in enumerate(name):
        if not ch.isprintable():
            return f"'{_escaped(ch)}' (U+{ord(ch):04X}) at index {i}"
    return None


def path_segment_name(name: str) -> bool:
    """Whether collection name ``name``, read as a path, leads somewhere other than a directory of
    its own: ``.`` or ``..``, or a name with a ``/`` or ``\\`` holding an empty, ``.`` or ``..``
    segment (``pub/../payroll``, ``./payroll``, ``payroll/``).

    qdrant-client's local mode keeps a collection in ``collection/<name>`` and deletes that
    directory by the name it is given, unchecked, so ``delete_collection("pub/../payroll")``
    deleted payroll's storage; no collection can be created under such a name (qdrant-client and
    Qdrant refuse ``/``, ``\\``, ``.`` and ``..`` in new names)."""
    if "/" not in name and "\\" not in name:  # every call checks its name: the common case first
        return name in (".", "..")
    return any(p in ("", ".", "..") for p in re.split(r"[/\\]", name))


def folded_name(name: str) -> str:
    """``name`` as a file system that ignores case and Unicode normalisation compares it (macOS's
    default APFS; Windows ignores case): case-folded between two NFD normalisations, so
    ``PAYROLL``, ``Payroll`` and ``payroll`` fold alike, and so do a composed and a decomposed ``é``."""
    return unicodedata.normalize("NFD", unicodedata.normalize("NFD", name).casefold())


def shown(name: str) -> str:
    """``name`` bare when it is printable and holds no quote or backslash, else ``repr(name)``
    (its unprintable characters escaped; the quotes mark it as escaped, so no bare name reads as
    another's escaped form)."""
    return name if name.isprintable() and _PLAIN.fullmatch(name) else repr(name)


def shell_quote(name: str) -> str:
    """``name`` as one word of a POSIX shell command a user may paste: :func:`shlex.quote` when it
    is printable, else bash/zsh/ksh ANSI-C quoting (``$'a\\nb'``), which keeps the command on one
    line and gives the command the same characters."""
    return shlex.quote(name) if name.isprintable() else f"$'{_escaped(name)}'"


def toml_key(name: str) -> str:
    """``name`` as a key of a TOML table: bare only when TOML reads it so (a dot would nest a table,
    a space or a non-ASCII letter is no bare key); else a basic string (:func:`toml_str`)."""
    return name if re.fullmatch(r"[A-Za-z0-9_-]+", name) else toml_str(name)


def toml_str(text: str) -> str:
    """``text`` as a TOML basic string, whose escapes are JSON's: the C0 controls and DEL must be
    escaped, and every other unprintable character is too (``\\uXXXX``, ``\\UXXXXXXXX``: TOML's
    escapes), so the string stays on one line and shows no bidirectional override.

    A lone surrogate (a Python str from code may hold one; no TOML file can) has no TOML escape:
    TOML's ``\\uXXXX`` must name a Unicode scalar value, and ``tomllib`` refuses the whole document
    for ``\\uD800``. It is written as the escape's text (``\\\\ud800``, which TOML reads back as a
    backslash, ``u`` and four hex digits), the spelling the audit log gives such a character, so
    the output stays valid TOML; it then names that text, not the name (a policy cannot name it)."""
    body = json.dumps(text, ensure_ascii=False)[1:-1]
    out = []
    for ch in body:
        if ch.isprintable() or ch == " ":
            out.append(ch)
        elif 0xD800 <= ord(ch) <= 0xDFFF:
            out.append(f"\\\\u{ord(ch):04x}")
        elif ord(ch) < 0x10000:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(f"\\U{ord(ch):08x}")
    return f'"{"".join(out)}"'


def shown_url(url: str) -> str:
    """``url`` without its ``user:password@`` part and query string, as messages and reports show it
    (a query string can carry a password too: ``redis://host/0?password=...``)."""
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc.rsplit("@", 1)[-1], parts.path, "", ""))
