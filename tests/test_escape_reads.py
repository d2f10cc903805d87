"""The detector's escape handling, made faster for the payload screen's readings, finds what it
found before.

A payload value with quotes or backslashes is read three times by the payload screen
(field_screen.value_findings: bare, quoted with neutral quotes, and as JSON stores it), and the
stored reading holds an escape for each quote and backslash, which detect.py's Python decodes one
by one. That code (``_escapes``, ``_blanked``, ``_escape_spans``, ``_whole_escapes``) now looks the
two-character escapes up without the regex and builds its lists in comprehensions; the copy of it
before (tests/detect_escapes_old.py) is the reference. Generated values hold escapes of every kind,
quotes, backslashes, unicode escapes and surrogate pairs, and secrets split by escapes.
"""
from __future__ import annotations

import json
import random

import pytest

from qdrant_guard import detect
from qdrant_guard.field_screen import _UNQUOTE, stored_findings, value_findings
from tests import detect_escapes_old as old

_WORDS = ["the", "policy", "said", "approved", "C:", "share", "new", "table", "x", "42", "é", "中文", "😀"]
_SECRETS = ["sk_live_4eC39HqLyjWDarjtT1zdp7dc", "123-45-6789", "4111 1111 1111 1111", "alice@corp.io",
            "AKIAZ2Q3W4E5R6T7Y3U4", "ghp_0123456789abcdefghijklmnopqrstuvwxyz", "a8f3Kq9vZ2xT7wLm4Rb6",
            "aws_secret_access_key = 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",
            "https://hooks.slack.com/services/T00000000/B00000000/XXXXXXXXabcdefghXXXXXXXX"]
_ESCAPES = ["\\n", "\\t", '\\"', "\\'", "\\/", "\\b", "\\f", "\\r", "\\\\", "\\\\n", "\\u0041", "\\u0031",
            "\\ud835\\udfcf", "\\ud835", "\\udfcf", "\\U0001D7CF", "\\x41", "\\x4", "%41", "%2D", "%zz", "&amp;",
            "&#49;", "&#x31;", "&nbsp;", "&nbsp1111", "&bogus;", "&#150;", "\\", '"', "'", "\n", "\x01", "%", "&"]
_NAMES = ["remark", "api_key", "path", "note", "password", "data"]


def _split(secret: str, rng: random.Random) -> str:
    """``secret`` with an escape inside it (a secret split by an escape): JSON's escaped slash for
    its slashes, or any escape at one place."""
    if "/" in secret and rng.random() < 0.5:
        return secret.replace("/", "\\/")
    k = rng.randrange(1, len(secret))
    return secret[:k] + rng.choice(_ESCAPES) + secret[k:]


def _value(rng: random.Random) -> str:
    parts = []
    for _ in range(rng.randint(1, 12)):
        r = rng.random()
        if r < 0.4:
            parts.append(rng.choice(_WORDS))
        elif r < 0.75:
            parts.append(rng.choice(_ESCAPES))
        elif r < 0.9:
            parts.append(rng.choice(_SECRETS))
        else:
            parts.append(_split(rng.choice(_SECRETS), rng))
    return rng.choice(["", " ", '"']).join(parts)


def _readings(name: str, value: str) -> list[str]:
    """The texts the payload screen has the detector read for ``value`` under ``name``."""
    return [f"{name}: {value}", f'{name}: "{value}"', f'{name}: "{value.translate(_UNQUOTE)}"',
            f'{name}: "{json.dumps(value, ensure_ascii=False)[1:-1]}"']


def _results(values: list[tuple[str, str]]) -> list[object]:
    out: list[object] = []
    for name, value in values:
        out.append(value_findings(name, value))
        out.append(stored_findings(name, value))
        out.extend(detect.find_sensitive(t) for t in _readings(name, value))
    return out


@pytest.fixture
def old_escapes():
    yield old
    old.restore()


def test_generated_values_read_as_before(old_escapes) -> None:
    rng = random.Random(20261207)
    values = [(rng.choice(_NAMES), _value(rng)) for _ in range(1000)]
    new = _results(values)
    old_escapes.install()
    before = _results(values)
    old_escapes.restore()
    assert new == before
    # the values reach what changed: findings covering escapes of each kind
    validators = [f.validator for r in new for f in r]
    for label in ("+json-escape", "+unicode-escape", "+percent", "+html-entity", "+escapes"):
        assert sum(v.endswith(label) for v in validators) >= 10, label


def test_the_four_functions_equal_the_reference() -> None:
    rng = random.Random(5)
    for _ in range(1000):
        name, value = rng.choice(_NAMES), _value(rng)
        for text in _readings(name, value):
            triggers = detect._triggers(text)
            escapes = detect._escapes(text, triggers)
            assert escapes == old._escapes(text, triggers), text
            if not escapes:
                continue
            assert detect._blanked(text, escapes, False) == old._blanked(text, escapes, False)
            kernel = detect._kernel.find_spans
            assert detect._escape_spans(text, escapes, kernel) == old._escape_spans(text, escapes, kernel)
            spans = set(kernel(text)) | set(old._escape_spans(text, escapes, kernel))
            assert detect._whole_escapes(text, spans, escapes) == old._whole_escapes(text, spans, escapes)


def test_a_secret_split_by_an_escape_is_still_found() -> None:
    # JSON's escaped slash (the short-escape path) inside an AWS secret and a Slack webhook, and
    # unicode escapes inside an SSN
    text = r"note: ssn 123-45-\u00367\u00389 and aws_secret_access_key = Kq2mZ8vT4xR\/nW1pL6yB3cH9dF0gJ5sA2eU8iO+t"
    assert [(f.type, f.validator) for f in detect.find_sensitive(text)] == [
        ("SSN", "ssa-rules+unicode-escape"), ("AWS_SECRET_KEY", "aws-context+json-escape")]
    text = r"see https:\/\/hooks.slack.com\/services\/T00000000\/B00000000\/XXXXXXXXabcdefghXXXXXXXX"
    assert [(f.type, f.validator, f.end) for f in detect.find_sensitive(text)] == [
        ("SLACK_TOKEN", "format+json-escape", len(text))]


def test_escapes_of_random_trigger_dense_text_equal_the_reference() -> None:
    # Every trigger next to every kind of character: the lookup table decides what it holds (a
    # two-character escape, or no escape possible) and leaves the rest to the regex.
    alphabet = "\\\\\\%%&&#xuU0123456789abcdefABCDEFnrtbf\"'/;sqz é\ud835\udfcf"
    rng = random.Random(11)
    for _ in range(6000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 24)))
        triggers = detect._triggers(text)
        assert detect._escapes(text, triggers) == old._escapes(text, triggers), text
