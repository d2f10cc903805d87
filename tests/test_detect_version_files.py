"""E-mail addresses and files named for a package and its version.

h-det made a file named for a version in a URL's path (``dl/release@v2.zip``) no address, by
taking its last labels off as file extensions. Left from that:

1. ``js/app@v2.bundle.js`` was still an address (``v2.bundle`` read as a domain).
2. A version file outside a URL (``lodash@4.17.21.tgz``) or in one written without ``://``
   (``cdn.example.com/pkg@v2.zip``) was still an address.
3. ``https://x.example/u/alice@corp.zip`` was missed: zip and map are TLDs as well as file
   extensions, and taking them off left one label, read as a file's name.

Now (h-det10) a domain that ends in a file extension and starts with a version (``v`` and digits,
digits and a label of digits, or digits and only extensions after them) is a file anywhere, and
the path rule never takes a TLD off. Every case runs through the native kernel and its pure-Python
twin (they must agree) and the public API.
"""
from __future__ import annotations

import random
from pathlib import Path

import pytest

from qdrant_guard import _detect_py
from qdrant_guard.detect import find_sensitive, redact
from tests.oracle import assert_same, both

NATIVE, PYTHON = both("detect")

# (text, [(type, found substring), ...])
CASES = [
    # 1. a bundle named for a version, in a path or not
    ("https://cdn.example.com/js/app@v2.bundle.js", []),
    ("<script src=\"/static/app@v2.bundle.js\"></script>", []),
    ("built app@v2.bundle.js in 3 s", []),
    ("https://unpkg.example/react-dom@18.2.0.production.min.js", []),
    # 2. a version file outside a URL, or in one with no '://'
    ("lodash@4.17.21.tgz", []),
    ("npm pack wrote lodash@4.17.21.tgz to ./dist", []),
    ("cdn.example.com/pkg@v2.zip", []),
    ("see files.example.com/dist/pkg@v1.2.0.tar.gz.", []),
    ("pkg@1.2.3.tar.gz pkg@2.zip pkg@2.min.js pkg@V10.ZIP", []),
    ("foo@1.0.0-rc.1.zip", []),
    ("jquery@3.7.1.min.js", []),
    ("https://x.example/get?file=lodash@4.17.21.tgz", []),
    ("https://x.example/get#pkg@v2.zip", []),
    # 3. a zip or map domain in a URL's path is a domain
    ("https://x.example/u/alice@corp.zip", [("EMAIL", "alice@corp.zip")]),
    ("https://x.example/u/bob@mail.corp.map", [("EMAIL", "bob@mail.corp.map")]),
    ("https://x.example/users/alice@json.zip", [("EMAIL", "alice@json.zip")]),
    ("https://s3.example.com/exports/alice@corp.zip.csv", [("EMAIL", "alice@corp.zip.csv")]),
    # ... so a name with no version there is read as one
    ("https://github.com/user/repo/archive/main@abc.zip", [("EMAIL", "main@abc.zip")]),
    ("https://cdn.example.com/a/app@abc.js.map", [("EMAIL", "app@abc.js.map")]),
    # evasions: a real address dressed as a version file is still found
    ("alice@corp.com.v2.zip", [("EMAIL", "alice@corp.com.v2.zip")]),
    ("alice@corp.com@v2.zip", [("EMAIL", "alice@corp.com")]),
    ("alice@corp.com/v2.zip", [("EMAIL", "alice@corp.com")]),
    ("v2.alice@corp.io", [("EMAIL", "v2.alice@corp.io")]),
    ("4.17.21@corp.io", [("EMAIL", "4.17.21@corp.io")]),
    ("alice@v2.corp.com", [("EMAIL", "alice@v2.corp.com")]),
    ("alice@4.17.21.corp.io", [("EMAIL", "alice@4.17.21.corp.io")]),
    ("alice@163.com", [("EMAIL", "alice@163.com")]),
    ("exports/alice@163.com.csv", [("EMAIL", "alice@163.com.csv")]),
    ("https://s3.example.com/exports/alice@126.com.json", [("EMAIL", "alice@126.com.json")]),
    ("alice@163.corp.zip", [("EMAIL", "alice@163.corp.zip")]),
    ("alice@v.zip alice@2fa.zip alice@1password.zip alice@1-2.zip alice@v2x.zip",
     [("EMAIL", "alice@v.zip"), ("EMAIL", "alice@2fa.zip"), ("EMAIL", "alice@1password.zip"),
      ("EMAIL", "alice@1-2.zip"), ("EMAIL", "alice@v2x.zip")]),
    ("https://x.example/u/alice@corp.com.zip", [("EMAIL", "alice@corp.com.zip")]),
    # the URL cases h-det pinned, unchanged
    ("get https://example.com/downloads/release@v2.zip now", []),
    ("https://registry.example.org/npm/lodash@4.17.21.tgz", []),
    ("https://cdn.example.com/app@2.0.0.js.MAP", []),
    ("https://downloads.example.com/builds/agent@nightly.exe", []),
    ("https://github.com/user/repo/archive/main@abc.tgz", []),
    ("https://x.example/dl/file@tar.gz", []),
    ("postgres://u:Kq2mZ8vT@db.corp.io/dumps/app@v3.tar.gz", [("DATABASE_URL_PASSWORD", "Kq2mZ8vT")]),
    ("https://unpkg.com/lodash@4.17.21/lodash.min.js", []),
    ("https://x.example/?email=a@b.zip", [("EMAIL", "a@b.zip")]),
    ("mailto:alice@corp.zip", [("EMAIL", "alice@corp.zip")]),
    ("write to bob@example.zip", [("EMAIL", "bob@example.zip")]),
    ("https://s3.example.com/exports/alice@example.com.csv", [("EMAIL", "alice@example.com.csv")]),
    ("https://example.com/users/alice@corp.io/profile", [("EMAIL", "alice@corp.io")]),
    ("https://example.com/users/alice@corp.zipper", [("EMAIL", "alice@corp.zipper")]),
    ("logo@2x.png icon@1.5x.png", []),
]


@pytest.mark.parametrize("text, expected", CASES)
def test_native_and_reference_agree_and_are_right(text: str, expected: list[tuple[str, str]]) -> None:
    spans = assert_same(NATIVE.find_spans, PYTHON.find_spans, text)
    assert [(t, text[a:b]) for a, b, t, _ in spans] == expected
    assert [(f.type, text[f.start:f.end]) for f in find_sensitive(text)] == expected


def test_a_version_file_is_left_and_an_address_beside_it_redacted() -> None:
    text = "npm pack wrote lodash@4.17.21.tgz; mail it to alice@163.com.csv and u/bob@corp.zip"
    assert redact(text) == "npm pack wrote lodash@4.17.21.tgz; mail it to [EMAIL] and u/[EMAIL]"


def test_only_zip_and_map_of_the_extensions_are_tlds() -> None:
    # The file rule takes every listed extension but a TLD off a name; if IANA adds one (a new
    # gTLD round), names ending in it may be addresses and the list must follow. IANA's list is
    # pinned in the repo (a dependency's copy would move under the test when it updates):
    # tests/test_detect_file_names.py checks the pinned file is whole.
    tlds = Path(__file__).parent / "data" / "iana-tlds.txt"
    iana = {line.strip().lower() for line in tlds.read_text().splitlines() if not line.startswith("#")}
    assert _detect_py._FILE_EXTS & iana == _detect_py._TLD_EXTS == {"zip", "map"}
    # ... and the native kernel holds the same two: a name in a path ending in one is an address
    for ext in sorted(_detect_py._FILE_EXTS):
        text = f"https://x.example/u/alice@corp.{ext}"
        spans = assert_same(NATIVE.find_spans, PYTHON.find_spans, text)
        assert [t for _, _, t, _ in spans] == (["EMAIL"] if ext in ("zip", "map") else []), text


_NAMES = ["lodash", "app", "react-dom", "pkg_name", "release", "v"]
_VERSIONS = ["v2", "V10", "1.2.3", "4.17.21", "2", "0.1", "1.0.0-rc.1", "v1.2.0"]
_EXTS = ["zip", "tgz", "tar.gz", "js", "min.js", "bundle.js", "production.min.js", "js.map", "whl", "ZIP",
         "map"]
_PLACES = ["{}", "see {}.", "https://cdn.example.com/dl/{}", "cdn.example.com/{}", "/srv/{}",
           "https://x.example/get?file={}", "file:///home/me/{}", "`{}`"]
_ADDRESSES = ["alice@corp.zip", "bob@mail.corp.map", "alice@163.com", "ops@v2.corp.io", "a@corp.io",
              "alice@corp-2.zip"]


def test_generated_version_files_are_no_address_anywhere_and_addresses_are() -> None:
    rng = random.Random(20261207)
    for _ in range(800):
        place, version = rng.choice(_PLACES), rng.choice(_VERSIONS)
        # a bare number then a name is an address's shape (alice@163.com.csv): extensions only
        ext = rng.choice(_EXTS if not version.isdigit() else [e for e in _EXTS if "bundle" not in e
                                                               and "production" not in e])
        name = f"{rng.choice(_NAMES)}@{version}.{ext}"
        text = place.format(name)
        spans = assert_same(NATIVE.find_spans, PYTHON.find_spans, text)
        assert not [s for s in spans if s[2] == "EMAIL"], text
        address = rng.choice(_ADDRESSES)
        text = place.format(address) if rng.random() < 0.5 else f"{place.format(name)} to {address}"
        spans = assert_same(NATIVE.find_spans, PYTHON.find_spans, text)
        assert [text[a:b] for a, b, t, _ in spans if t == "EMAIL"] == [address], text


def test_random_domain_shapes_agree() -> None:
    # Labels around the edges of the version rule: digits, 'v' and digits, names, extensions (TLDs
    # or not), hyphens, empty labels, in a URL's path, query, or bare.
    labels = ["v2", "V10", "v", "2", "163", "0", "4", "17", "21", "rc", "1-2", "2fa", "corp", "com", "bundle",
              "min", "zip", "ZIP", "map", "js", "tar", "gz", "csv", "io", "x", "", "-"]
    rng = random.Random(13)
    for _ in range(4000):
        domain = ".".join(rng.choice(labels) for _ in range(rng.randint(1, 6)))
        local = rng.choice(["alice", "lodash", "v2", "4.17", "a.b", "x+y"])
        place = rng.choice(["{}", "https://h.example/p/{}", "https://h.example/?f={}", "h.example/{}",
                            "postgres://u:p@db/{}", "mailto:{}"])
        assert_same(NATIVE.find_spans, PYTHON.find_spans, place.format(f"{local}@{domain}"))
