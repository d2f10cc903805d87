"""E-mail addresses in a database URL's query or fragment before any '/'.

A database URL's password holds '?' and '#' unescaped, so its authority does not end at them as
RFC 3986's does; an address after a '?' or '#' with no '/' before it was left unfound
(``postgres://u:p@db.example?contact=alice@example.com``). Now a '?' or '#' right after the
credentials' '@' and a host list starts the query or fragment, and the password ends at the last
'@' before the address. A '?' or '#' with no '@' before it stays the password's. Every case runs
through the native kernel and its pure-Python twin (they must agree) and the public API.
"""
from __future__ import annotations

import random

import pytest

from qdrant_guard.detect import find_sensitive, redact
from tests.oracle import assert_same, both

NATIVE, PYTHON = both("detect")

# (text, [(type, found substring), ...])
CASES = [
    # found: the query or fragment follows the credentials' '@' and a host
    ("postgres://u:p@db.example?contact=alice@example.com", [("EMAIL", "alice@example.com")]),
    ("mysql://u:p@h#x@y.com", [("EMAIL", "x@y.com")]),
    ("postgres://u:s3cr3tPw@db.internal?to=u@corp.io",
     [("DATABASE_URL_PASSWORD", "s3cr3tPw"), ("EMAIL", "u@corp.io")]),
    ("see postgresql://app:S3cr3t@db.internal:5432?notify=ops@example.com&cc=bob@corp.io today",
     [("DATABASE_URL_PASSWORD", "S3cr3t"), ("EMAIL", "ops@example.com"), ("EMAIL", "bob@corp.io")]),
    ("postgres://u:Kq2mZ8vT@[::1]:5432,h2:5433#to=a@corp.io",
     [("DATABASE_URL_PASSWORD", "Kq2mZ8vT"), ("EMAIL", "a@corp.io")]),
    ("MONGODB+SRV://svc:Zq9x!T2w@cluster0.example.net?authSource=admin&owner=dba@corp.io",
     [("DATABASE_URL_PASSWORD", "Zq9x!T2w"), ("EMAIL", "dba@corp.io")]),
    # ... a password holding '?' or '#' (no '@' before them) keeps them, the address after is found
    ("postgres://user:pa?ss9Kq@db?x=alice@example.com",
     [("DATABASE_URL_PASSWORD", "pa?ss9Kq"), ("EMAIL", "alice@example.com")]),
    # ... and a password holding a raw '@' keeps it up to the last '@' before the address
    ("postgres://user:p@ss#word9@localhost?x=alice@example.com",
     [("DATABASE_URL_PASSWORD", "p@ss#word9"), ("EMAIL", "alice@example.com")]),
    # ... and one holding a raw '@', then a host's characters, then '?' is read as libpq and
    # SQLAlchemy read it (password up to the first '@', host "ss"): what the threat model states
    ("postgres://u:Kq2v@ss?w@db.corp.io", [("DATABASE_URL_PASSWORD", "Kq2v"), ("EMAIL", "w@db.corp.io")]),
    # not found: the '?' or '#' is the password's (no '@' before it), the tail is user@host
    ("postgres://user:pa?ss@host.example.com/db", [("DATABASE_URL_PASSWORD", "pa?ss")]),
    ("postgres://user:p#w@host.example.com", [("DATABASE_URL_PASSWORD", "p#w")]),
    ("mongodb+srv://u:Zq9#x!T2@cluster0.example.net", [("DATABASE_URL_PASSWORD", "Zq9#x!T2")]),
    ("mongodb://u:p?w#d@corp.io", [("DATABASE_URL_PASSWORD", "p?w#d")]),
    # ... the local part follows the credentials' '@': the host, with no '?' or '#' after it
    ("postgres://u:p@alice@example.com", [("DATABASE_URL_PASSWORD", "p@alice")]),
    ("postgres://u:p@alice@example.com?sslmode=require", [("DATABASE_URL_PASSWORD", "p@alice")]),
    # ... other characters than a host's between the '@' and the '?' (a password's '!')
    ("postgres://u:p@ss!w?rd@db.example.com", [("DATABASE_URL_PASSWORD", "p@ss!w?rd")]),
    # no credentials: a '?' after a host list starts the query when the address is a parameter's
    # value (tests/test_detect_url_mail.py)
    ("postgres://db.example?contact=alice@example.com", [("EMAIL", "alice@example.com")]),
    # ... an empty local part
    ("postgres://u:p@db?@corp.io", [("DATABASE_URL_PASSWORD", "p@db?")]),
    # past the first '/', as before
    ("postgres://app:s3cretPw@db.example.com/app?notify=ops@example.com",
     [("DATABASE_URL_PASSWORD", "s3cretPw"), ("EMAIL", "ops@example.com")]),
]


@pytest.mark.parametrize("text, expected", CASES)
def test_native_and_reference_agree_and_are_right(text: str, expected: list[tuple[str, str]]) -> None:
    spans = assert_same(NATIVE.find_spans, PYTHON.find_spans, text)
    assert [(t, text[a:b]) for a, b, t, _ in spans] == expected
    assert [(f.type, text[f.start:f.end]) for f in find_sensitive(text)] == expected


def test_the_address_and_the_password_are_both_redacted() -> None:
    # Before, the password ran to the address's '@' and held "example": a placeholder, so nothing
    # was redacted.
    text = "postgres://app:Kq2mZ8vT@db.example?contact=alice@example.com"
    assert redact(text) == "postgres://app:[DATABASE_URL_PASSWORD]@db.example?contact=[EMAIL]"


_DB_SCHEMES = ["postgres", "postgresql+asyncpg", "mysql", "mongodb+srv", "REDIS", "amqps"]
# Outside a database scheme the authority ends at any '?' or '#' (RFC 3986), password or not.
_OTHER_SCHEMES = ["https", "ftp"]
_PASSWORD = "abcXYZ0123456789?#!~"
_HOSTS = ["db.internal", "localhost", "h", "10.0.0.7:5432", "[::1]:6379", "h1:5432,h2:5433", "db-1.corp.io"]


def _database_url(rng: random.Random) -> tuple[str, str, str | None]:
    """A database URL with a password of letters, digits, '?', '#', '!' and '~' (no '@'), and maybe
    an address in its query or fragment; (text, password, address)."""
    password = "".join(rng.choice(_PASSWORD) for _ in range(rng.randint(8, 16)))
    url = f"{rng.choice(_DB_SCHEMES)}://user:{password}@{rng.choice(_HOSTS)}"
    address = None
    if rng.random() < 0.7:
        address = f"{rng.choice(['alice', 'ops.team', 'b+tag'])}@{rng.choice(['corp.io', 'mail.example.org'])}"
        url += f"{rng.choice(['', '/app'])}{rng.choice('?#')}{rng.choice(['to=', 'cc=x&to=', ''])}{address}"
    return url, password, address


def test_generated_database_urls_agree_and_no_password_character_is_an_address() -> None:
    rng = random.Random(20261207)
    found = 0
    for _ in range(1500):
        text, password, address = _database_url(rng)
        spans = assert_same(NATIVE.find_spans, PYTHON.find_spans, text)
        pw_start = text.index(password)
        # the whole password is one finding (or none: the placeholder rule), never an address's part
        assert [(a, b) for a, b, t, _ in spans if t == "DATABASE_URL_PASSWORD"] in (
            [(pw_start, pw_start + len(password))], []), (text, spans)
        emails = [(a, b) for a, b, t, _ in spans if t == "EMAIL"]
        assert all(a > pw_start + len(password) for a, _ in emails), (text, spans)
        if address is not None:
            # the address in the query or fragment is found, a '/' before it or not
            assert emails == [(text.rindex(address), len(text))], (text, spans)
            found += 1
    assert found > 900


def test_random_url_shapes_agree() -> None:
    # Atoms around the edges of the rule: '@', '?', '#', '/', host characters, ports, addresses.
    atoms = ["@", "?", "#", "/", ":", "u", "p", "db", ".example", ".io", "x=", "&", "[::1]", ",", "!", "%40",
             "alice", "@corp.io", "5432", " ", "-", "_", "é"]
    rng = random.Random(7)
    for _ in range(3000):
        scheme = rng.choice(_DB_SCHEMES + _OTHER_SCHEMES + ["pgsql", "cockroachdb", "http"])
        text = f"{scheme}://" + "".join(rng.choice(atoms) for _ in range(rng.randint(1, 14)))
        assert_same(NATIVE.find_spans, PYTHON.find_spans, text)
