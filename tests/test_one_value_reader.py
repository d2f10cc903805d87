"""detect.one_value_reader: the payload screen's readings of one value share the kernel's spans (the
JSON-escaped reading of a text with newlines decodes to the plain reading's text, which the kernel
had read), and find what find_sensitive finds. Real detector, nothing mocked; the kernel is only
wrapped to count what it reads."""
from __future__ import annotations

import json
import random

import pytest

from qdrant_guard import detect, field_screen

SECRET = "a8f3k2j9x0q7w1e5r4t6"  # tests/test_review54.py's: a finding only next to a secret-like name
GHP = "ghp_16C7e42F292c6912E7710c838347Ae178B4a"
PIECES = ["the", "policy", "covers", "leave", "requests", "for", "staff", "Ref 12-3", "page 4", "résumé", "ｐａｓｓ",
          "123-45-6789", "4111111111111111", "maria.lopez@example.com", "AKIAIOSFODNN7EXAMPLE", GHP,
          "a8f3b9c2d4e5f6a7b8c9d0e1f2a3b4c5", "hunter2hunter2", "api_key:", "password =", SECRET, SECRET,
          "%41%42", "&amp;", "MTIzLTQ1LTY3ODk=",
          "+1 415 555 0100", "DE89370400440532013000", "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2lnbmF0dXJl"]
SEPARATORS = [" ", " ", " ", "\n", "\n", "\t", "\r\n", "\x01", "\x1f", "\n\n", "'", '"', "\\", ": "]
NAMES = ["note", "summary", "description", "api_key", "password", "db_password", "token", "ssn", "card", "x"]


def _value(rng: random.Random) -> str:
    out = []
    for _ in range(rng.randint(1, 40)):
        out.append(rng.choice(PIECES))
        out.append(rng.choice(SEPARATORS))
    return "".join(out)


class _Counting:
    """The kernel, with the texts it is asked to read kept in order."""

    def __init__(self, kernel):
        self.kernel, self.read = kernel, []

    def find_spans(self, text):
        self.read.append(text)
        return self.kernel.find_spans(text)


def test_a_reader_finds_what_find_sensitive_finds_and_hands_out_its_own_lists():
    rng = random.Random(7)
    read = detect.one_value_reader()
    texts = [_value(rng) for _ in range(60)]
    for text in texts + texts + [f'x: {json.dumps(t)}' for t in texts]:
        assert read(text) == detect.find_sensitive(text), text
    first = read(texts[0])
    first.clear()
    assert read(texts[0]) == detect.find_sensitive(texts[0])
    with pytest.raises(TypeError):
        read(b"123-45-6789")


def test_value_findings_are_the_same_with_and_without_the_shared_reader(monkeypatch):
    rng = random.Random(20261207)
    pairs = [(rng.choice(NAMES), _value(rng)) for _ in range(1500)]
    # And secrets the escaped reading alone finds: after a newline, next to a secret-like name.
    # (No quote or backslash: the values the shared reader serves.)
    pairs += [(rng.choice(NAMES), _value(rng).replace('"', "'").replace("\\", "/")
               + rng.choice(("\napi_key: \n", "\npassword = \t")) + SECRET) for _ in range(300)]
    monkeypatch.setattr(field_screen, "_SHARED_READ_MIN", 10**9)  # every reading by find_sensitive
    alone = [field_screen.value_findings(n, v) for n, v in pairs]
    monkeypatch.setattr(field_screen, "_SHARED_READ_MIN", 0)  # every value with a newline shares one
    shared = [field_screen.value_findings(n, v) for n, v in pairs]
    for (n, v), a, s in zip(pairs, alone, shared):
        assert s == a, (n, v)
    # The sample reaches what the reader serves: values with control characters only and a
    # finding in their escaped reading alone ('\na8f3...'), in their plain reading, and in none.
    served = [(n, v, a) for (n, v), a in zip(pairs, alone)
              if '"' not in v and "\\" not in v and field_screen._JSON_ESCAPED.search(v)]
    plain = [n_v_a for n_v_a in served if detect.find_sensitive(f'{n_v_a[0]}: "{n_v_a[1]}"')]
    assert len(served) > 400 and len(plain) > 300 and sum(not a for _, _, a in served) > 20
    assert sum(bool(a) and not detect.find_sensitive(f'{n}: "{v}"') for n, v, a in served) > 10


def test_a_long_text_of_many_lines_is_read_by_the_kernel_once(monkeypatch):
    counting = _Counting(detect._kernel)
    monkeypatch.setattr(detect, "_kernel", counting)
    value = "\n".join(f"Line {i} of the leave policy for staff in the regional office." for i in range(10))
    assert len(value) >= field_screen._SHARED_READ_MIN
    assert field_screen.value_findings("summary", value) == []
    plain = f'summary: "{value}"'
    escaped = f"summary: {json.dumps(value)}"
    assert counting.read.count(plain) == 1  # the escaped reading's decoded view: not read again
    assert counting.read.count(escaped) == 1
    # A secret after a newline, found only as JSON writes it ("\na8f3..."), is still found.
    counting.read.clear()
    text = f"{value}\napi_key: \n{SECRET}"
    assert not detect.find_sensitive(f'summary: "{text}"')
    found = field_screen.value_findings("summary", text)
    assert [(f.category, f.start, f.end) for f in found] == [("CREDENTIAL", len(text) - len(SECRET) - 1, len(text))]
    assert counting.read.count(f'summary: "{text}"') == 1
