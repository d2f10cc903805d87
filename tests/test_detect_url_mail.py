"""E-mail addresses in URLs: a database URL's query with no credentials before it, and files named
for a version in a URL's path.

1. ``postgres://db.internal?x=a@corp.io`` gave nothing: with no '@' before the '?' the detector
   left the '?' to a user name (libpq and SQLAlchemy read ``db.internal?x=a`` as the user, ``corp.io``
   as the host). Now a '?' or '#' with no '@' before it starts the query or fragment when the
   text before it is hosts with no ':' and the address is a parameter's value ('=' right before
   it). After a ':' the text up to the '@' stays a password, a port or not, as those parsers read
   it (``db.internal:5432?to=alice@example.com`` has the password ``5432?to=alice``): a missed
   password is the worse miss. An address that is not a value (``db?abc@corp.io``) stays
   the user name's.
2. ``https://example.com/downloads/release@v2.zip`` read as the address ``release@v2.zip`` (zip
   and map are TLDs). In a URL's path (a '/' and no '?' or '#' between the '://' and it), an
   address-shaped text whose last labels are file extensions and whose other labels are no domain
   (one label, or a last label that is not 2+ letters) is a file: no address. A query value, a
   ``mailto:``, bare text, or a file named for an address (``exports/alice@example.com.csv``)
   keeps it. Since h-det10 the last label must be no TLD (zip and map are: ``u/alice@corp.zip`` is
   an address again), and a file named for a version (``release@v2.zip``, ``lodash@4.17.21.tgz``)
   is no address anywhere (tests/test_detect_version_files.py). Since h-det11 the file rule holds
   anywhere, a query value too (``?file=agent@nightly.exe``: exe is no TLD), and a dist-tag
   (``nightly``, ``latest``) followed by extensions only is a version
   (tests/test_detect_file_names.py).

Every case runs through the native kernel and its pure-Python twin (they must agree) and the
public API.
"""
from __future__ import annotations

import random

import pytest

from qdrant_guard.detect import find_sensitive, redact
from tests.oracle import assert_same, both

NATIVE, PYTHON = both("detect")

# (text, [(type, found substring), ...])
CASES = [
    # 1. a database URL with no credentials: the address in its query or fragment is found
    ("postgres://db.internal?x=a@corp.io", [("EMAIL", "a@corp.io")]),
    ("mysql://db.example.com#contact=bob@corp.io", [("EMAIL", "bob@corp.io")]),
    ("mongodb://h1,h2,h3?replicaSet=rs0&contact=dba@corp.io", [("EMAIL", "dba@corp.io")]),
    ("DATABASE_URL=postgres://db?cc=bob@corp.io&to=alice@example.com",
     [("EMAIL", "bob@corp.io"), ("EMAIL", "alice@example.com")]),
    # ... as before with a '/' (the brief's examples; these passed before too)
    ("postgres://db.example.com/app?user=alice@example.com", [("EMAIL", "alice@example.com")]),
    ("mysql://host/db#contact=bob@corp.io", [("EMAIL", "bob@corp.io")]),
    # ... still the password's: after a ':' the parsers read a password, a port or not
    ("REDIS://cache.corp.io:6379?owner=ops@corp.io", [("DATABASE_URL_PASSWORD", "6379?owner=ops")]),
    ("mongodb://h1:27017,h2:27017?replicaSet=rs0&contact=dba@corp.io",
     [("DATABASE_URL_PASSWORD", "27017,h2:27017?replicaSet=rs0&contact=dba")]),
    ("postgres://[::1]:5432?to=a@corp.io", [("DATABASE_URL_PASSWORD", ":1]:5432?to=a")]),
    ("postgres://user:pa?ss@db.corp.io", [("DATABASE_URL_PASSWORD", "pa?ss")]),
    ("postgres://admin:Secret?x=abc@db.corp.io", [("DATABASE_URL_PASSWORD", "Secret?x=abc")]),
    ("redis://:5432?x=a@corp.io", [("DATABASE_URL_PASSWORD", "5432?x=a")]),
    ("postgres://db:5432x?to=a@corp.io", [("DATABASE_URL_PASSWORD", "5432x?to=a")]),
    ("postgres://db:x5432?to=a@corp.io", [("DATABASE_URL_PASSWORD", "x5432?to=a")]),
    ("postgres://db:?to=a@corp.io", [("DATABASE_URL_PASSWORD", "?to=a")]),
    ("postgres://h1,:5432?to=a@corp.io", [("DATABASE_URL_PASSWORD", "5432?to=a")]),
    ("postgres://db::5432?to=a@corp.io", [("DATABASE_URL_PASSWORD", ":5432?to=a")]),
    ("postgres://[::1]:Secret?to=a@corp.io", [("DATABASE_URL_PASSWORD", ":1]:Secret?to=a")]),
    ("postgres://h1,h:5432?to=a@corp.io", [("DATABASE_URL_PASSWORD", "5432?to=a")]),
    # ... or the address is no parameter's value
    ("postgres://user:1234?abc@db.corp.io", [("DATABASE_URL_PASSWORD", "1234?abc")]),
    ("postgres://db.internal?alice@example.com", []),
    # ... a password of digits, then '?', a name and '=' stays whole (h-det had read it as a query)
    ("postgres://admin:1234?x=abc@db.corp.io", [("DATABASE_URL_PASSWORD", "1234?x=abc")]),
    # 2. a file named for a version in a URL's path: no address
    ("get https://example.com/downloads/release@v2.zip now", []),
    ("https://github.com/user/repo/archive/main@abc.tgz", []),
    ("https://registry.example.org/npm/lodash@4.17.21.tgz", []),
    ("https://cdn.example.com/libs/jquery@3.7.1.min.js", []),
    ("https://files.example.com/dist/pkg@v1.2.0.tar.gz", []),
    ("https://cdn.example.com/app@2.0.0.js.MAP", []),
    ("https://downloads.example.com/builds/agent@nightly.exe", []),
    ("file:///home/me/Downloads/release@v2.zip", []),
    ("https://x.example/dl/file@tar.gz", []),
    ("https://x.example/p/a@b.c.gz", []),
    # ... but a zip or map domain is a domain (h-det10): no version, so an address
    ("https://github.com/user/repo/archive/main@abc.zip", [("EMAIL", "main@abc.zip")]),
    ("https://x.example/p/a@b.c.zip", [("EMAIL", "a@b.c.zip")]),
    ("postgres://u:Kq2mZ8vT@db.corp.io/dumps/app@v3.tar.gz", [("DATABASE_URL_PASSWORD", "Kq2mZ8vT")]),
    # ... versions with no letters TLD were never addresses
    ("https://cdn.example.com/pkg@1.2.3/dist.zip", []),
    ("https://unpkg.com/lodash@4.17.21/lodash.min.js", []),
    # ... an address still: a query or fragment value, mailto:, bare text, no '/' after the host
    ("https://x.example/?email=a@b.zip", [("EMAIL", "a@b.zip")]),
    ("https://x.example/dl?to=alice@corp.zip", [("EMAIL", "alice@corp.zip")]),
    ("https://x.example/page#contact=bob@mail.zip", [("EMAIL", "bob@mail.zip")]),
    ("https://x.example?who=a@b.zip", [("EMAIL", "a@b.zip")]),
    ("mailto:alice@corp.zip", [("EMAIL", "alice@corp.zip")]),
    ("write to bob@example.zip", [("EMAIL", "bob@example.zip")]),
    # ... a file named for an address, an address in a path, an extension that is no file's
    ("https://s3.example.com/exports/alice@example.com.csv", [("EMAIL", "alice@example.com.csv")]),
    ("https://example.com/u/alice@corp.io.json", [("EMAIL", "alice@corp.io.json")]),
    ("https://example.com/users/alice@corp.io/profile", [("EMAIL", "alice@corp.io")]),
    ("https://example.com/users/alice@corp.zipper", [("EMAIL", "alice@corp.zipper")]),
]


@pytest.mark.parametrize("text, expected", CASES)
def test_native_and_reference_agree_and_are_right(text: str, expected: list[tuple[str, str]]) -> None:
    spans = assert_same(NATIVE.find_spans, PYTHON.find_spans, text)
    assert [(t, text[a:b]) for a, b, t, _ in spans] == expected
    assert [(f.type, text[f.start:f.end]) for f in find_sensitive(text)] == expected


def test_a_port_then_a_query_holds_a_password_for_the_public_api_too() -> None:
    text = "postgresql://db.internal:5432?application_name=etl&notify=alice@example.com"
    spans = assert_same(NATIVE.find_spans, PYTHON.find_spans, text)
    assert [(t, text[a:b]) for a, b, t, _ in spans] == [
        ("DATABASE_URL_PASSWORD", "5432?application_name=etl&notify=alice")]
    found = find_sensitive(text)
    assert [f.type for f in found] == ["DATABASE_URL_PASSWORD"]
    assert text[found[0].start:found[0].end].startswith("5432?application_name=etl&notify=alice")


def test_the_address_not_the_user_name_is_redacted() -> None:
    # Before, the '?' was left to a user name: nothing was found and the address stayed.
    text = "postgres://db.internal?notify=ops@corp.io"
    assert redact(text) == "postgres://db.internal?notify=[EMAIL]"


def test_a_release_archive_link_is_left_as_written() -> None:
    text = "Download https://example.com/downloads/release@v2.zip and check its hash."
    assert redact(text) == text


_DB_SCHEMES = ["postgres", "postgresql+asyncpg", "mysql", "mongodb+srv", "REDIS", "amqps"]
_HOST_LISTS = ["db.internal", "localhost", "h", "10.0.0.7", "h1,h2", "db-1.corp.io", "[fe80--1]"]
_ADDRESSES = ["alice@corp.io", "ops.team@mail.example.org", "b+tag@corp.zip"]


def test_generated_credentialless_database_urls_find_every_address() -> None:
    rng = random.Random(20261207)
    for _ in range(600):
        address = rng.choice(_ADDRESSES)
        sep = rng.choice("?#")
        query = rng.choice(["to=", "sslmode=require&cc=", "a=1&b=2&owner="])
        text = f"{rng.choice(_DB_SCHEMES)}://{rng.choice(_HOST_LISTS)}{sep}{query}{address}"
        spans = assert_same(NATIVE.find_spans, PYTHON.find_spans, text)
        assert [(text[a:b], t) for a, b, t, _ in spans] == [(address, "EMAIL")], text


_NAMES = ["release", "main", "lodash", "app-core", "pkg_name", "v"]
_VERSIONS = ["v2", "1.2.3", "4.17.21", "abc", "nightly", "2024-01-01", "rc1"]
_EXTS = ["zip", "tgz", "tar.gz", "js", "min.js", "mjs", "css", "whl", "js.map", "jar", "ZIP"]
_SCHEMES = ["https", "http", "ftp", "s3", "file", "postgres"]


def test_generated_version_files_in_paths_are_no_address_and_query_values_are() -> None:
    # Since h-det10: a version (v2, 1.2.3, 4.17.21) makes a file anywhere, a query value too; with
    # none, a name ending in a TLD (zip, map) is a domain, in a path too. Since h-det11: a
    # dist-tag (nightly) and extensions only is a version, and a name ending in an extension that
    # is no TLD is a file in a query value too.
    rng = random.Random(7)
    for _ in range(600):
        version, ext = rng.choice(_VERSIONS), rng.choice(_EXTS)
        name = f"{rng.choice(_NAMES)}@{version}.{ext}"
        versioned = version in ("v2", "1.2.3", "4.17.21", "nightly")
        base = f"{rng.choice(_SCHEMES)}://cdn.example.com{rng.choice(['', ':8443'])}"
        in_path = f"{base}/{rng.choice(['', 'dl/', 'npm/a/b/'])}{name}"
        spans = assert_same(NATIVE.find_spans, PYTHON.find_spans, in_path)
        address = not versioned and ext.lower().endswith(("zip", "map"))
        assert [t for _, _, t, _ in spans] == (["EMAIL"] if address else []), in_path
        # the same file named for an address keeps it; the same text as a query value is one
        named = f"{base}/exports/alice@example.com.{rng.choice(_EXTS)}"
        spans = assert_same(NATIVE.find_spans, PYTHON.find_spans, named)
        assert [t for _, _, t, _ in spans] == ["EMAIL"], named
        if rng.random() < 0.5:
            query = f"{base}/get?file={name}"
            spans = assert_same(NATIVE.find_spans, PYTHON.find_spans, query)
            assert [t for _, _, t, _ in spans] == (["EMAIL"] if address else []), query


def test_random_url_shapes_agree() -> None:
    # Atoms around the edges of both rules: '@', '?', '#', '/', '=', ports, brackets, extensions.
    atoms = ["@", "?", "#", "/", ":", "=", "u", "db", ".example", ".io", "x=", "&", "[::1]", "[", "]", ",",
             "5432", "alice", "@corp.io", "@v2.zip", "@1.2.3.tgz", ".zip", ".tar", ".gz", ".min", ".js", ".csv",
             "example.com", "v2", ".", " ", "-", "_", "é", "%40"]
    schemes = _DB_SCHEMES + ["https", "HTTP", "file", "git+https", "pgsql"]
    rng = random.Random(11)
    for _ in range(4000):
        text = f"{rng.choice(schemes)}://" + "".join(rng.choice(atoms) for _ in range(rng.randint(1, 14)))
        assert_same(NATIVE.find_spans, PYTHON.find_spans, text)
