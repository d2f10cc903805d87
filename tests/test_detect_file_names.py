"""Files named like an address: a dist-tag for a version, and extensions that are no TLD.

h-det10 left two kinds of file read as e-mail addresses:

1. A version that is no number ending in a TLD that is also a file extension: ``pkg@latest.zip``,
   ``core@dev.zip``, ``repo@main.zip`` (all found as file names in public code; no address at a
   dist-tag's zip or map domain was). A dist-tag followed by extensions only is now a version
   (``version_file``); a dist-tag and a name (``alice@dev.corp.zip``) keeps the address.
2. ``agent@nightly.exe`` outside a URL's path: the detector keeps no list of TLDs (it asks only for
   a last label of 2+ letters, so ``alice@corp.internal`` is found), and only a URL's path took
   the extensions off. Now a name whose last labels are extensions that are no TLD, leaving no
   domain before them, is a file anywhere (``ext_file``): it cannot be a deliverable address,
   while a file named for one keeps it (``alice@corp.com.exe``).

Which extensions are TLDs is read from IANA's list pinned in tests/data/iana-tlds.txt, not from a
list a dependency ships, so the test changes only when that file is updated on purpose. Every
case runs through the native kernel and its pure-Python twin (they must agree) and the public API.
"""
from __future__ import annotations

import random
import re
from pathlib import Path

import pytest

from qdrant_guard import _detect_py
from qdrant_guard.detect import find_sensitive, redact
from tests.oracle import assert_same, both

NATIVE, PYTHON = both("detect")
ROOT = Path(__file__).resolve().parents[1]
PINNED = ROOT / "tests" / "data" / "iana-tlds.txt"

# (text, [(type, found substring), ...])
CASES = [
    # 1. a dist-tag and extensions only is a version, anywhere
    ("pkg@latest.zip", []),
    ("const latestZip = path.join(DOWNLOAD_DIR, \"GWENT@latest.zip\");", []),
    ("✔ core@dev.zip file decompression completed", []),
    ("https://cdn.jsdelivr.net/gh/user/repo@main.zip", []),
    ("Kwpolska/nikola@master.zip", []),
    ("pkg@next.map app@nightly.js.map app@Canary.min.js.map", []),
    ("https://x.example/get?file=pkg@latest.zip", []),
    ("hub@latest.tgz badge@beta.zip.csv pkg@RC.tar.gz", []),
    # ... and a dist-tag and a name, or a TLD last, keeps the address
    ("alice@dev.corp.zip", [("EMAIL", "alice@dev.corp.zip")]),
    ("ops@beta.corp.map", [("EMAIL", "ops@beta.corp.map")]),
    ("contacto@nightly.software support@nightly.app luck@nightly.com",
     [("EMAIL", "contacto@nightly.software"), ("EMAIL", "support@nightly.app"), ("EMAIL", "luck@nightly.com")]),
    ("team@canary.accountants", [("EMAIL", "team@canary.accountants")]),
    ("alice@latest.zipper alice@latestx.zip alice@lat.zip",
     [("EMAIL", "alice@latest.zipper"), ("EMAIL", "alice@latestx.zip"), ("EMAIL", "alice@lat.zip")]),
    ("https://x.example/u/alice@corp.zip", [("EMAIL", "alice@corp.zip")]),
    # 2. extensions that are no TLD, leaving no domain, make a file anywhere
    ("agent@nightly.exe", []),
    ("downloaded agent@nightly.exe to C:\\tmp", []),
    ("https://x.example/get?file=agent@nightly.exe", []),
    ("https://x.example/get#agent@nightly.exe", []),
    ("notes@draft.txt report@2024-q3.pdf data@export.json.gz style@main.min.css", []),
    ("alice@corp.exe", []),
    ("file@1.txt", []),
    ("mailto:agent@nightly.exe", []),
    # ... while a file named for an address keeps it, and TLDs are never taken off
    ("alice@corp.com.exe", [("EMAIL", "alice@corp.com.exe")]),
    ("https://x.example/get?file=alice@corp.io.json", [("EMAIL", "alice@corp.io.json")]),
    ("alice@corp.zip.csv", [("EMAIL", "alice@corp.zip.csv")]),
    ("alice@corp.internal alice@db.local", [("EMAIL", "alice@corp.internal"), ("EMAIL", "alice@db.local")]),
    ("https://x.example/?email=a@b.zip", [("EMAIL", "a@b.zip")]),
    # git's release notes write placeholders at the non-TLD xz; no such address can be delivered
    ("\"A U. Thor\" <author@example.xz>", []),
    # a database URL's password is still covered when a file, not an address, follows it
    ("postgres://u:Kq2mZ8vT@db.corp.io?to=agent@nightly.exe",
     [("DATABASE_URL_PASSWORD", "Kq2mZ8vT@db.corp.io?to=agent")]),
]


@pytest.mark.parametrize("text, expected", CASES)
def test_native_and_reference_agree_and_are_right(text: str, expected: list[tuple[str, str]]) -> None:
    spans = assert_same(NATIVE.find_spans, PYTHON.find_spans, text)
    assert [(t, text[a:b]) for a, b, t, _ in spans] == expected
    assert [(f.type, text[f.start:f.end]) for f in find_sensitive(text)] == expected


def test_files_are_left_and_the_addresses_beside_them_redacted() -> None:
    text = "built agent@nightly.exe and pkg@latest.zip for alice@corp.com.exe and bob@dev.corp.zip"
    assert redact(text) == "built agent@nightly.exe and pkg@latest.zip for [EMAIL] and [EMAIL]"


def _pinned_tlds() -> set[str]:
    lines = PINNED.read_text().splitlines()
    # a truncated or foreign file would make the checks below vacuous
    assert re.fullmatch(r"# Version (\d{10}), Last Updated .+", lines[0]), lines[0]
    tlds = {line.strip().lower() for line in lines[1:] if line.strip()}
    assert len(tlds) > 1000 and {"com", "org", "io", "de", "zip", "map", "app", "dev"} <= tlds
    return tlds


def test_the_extensions_that_are_tlds_are_those_of_the_pinned_iana_list() -> None:
    # The twins name the list's version; updating tests/data/iana-tlds.txt means re-reading the
    # extensions against it, and this test says which changed.
    version = PINNED.read_text().split()[2].rstrip(",")
    for source in ("native/detect.c", "qdrant_guard/_detect_py.py"):
        comment = (ROOT / source).read_text()
        assert f"version {version}, pinned in" in comment and "tests/data/iana-tlds.txt" in comment, source
    tlds = _pinned_tlds()
    assert _detect_py._FILE_EXTS & tlds == _detect_py._TLD_EXTS == {"zip", "map"}
    # "no TLD is an image format's extension" (the density rule's premise)
    assert not _detect_py._IMAGE_EXTS & tlds
    # ... and the native kernel takes off exactly the extensions that are no TLD, anywhere
    for ext in sorted(_detect_py._FILE_EXTS):
        for text in (f"alice@corp.{ext}", f"https://x.example/u/alice@corp.{ext}", f"?f=alice@corp.{ext.upper()}"):
            spans = assert_same(NATIVE.find_spans, PYTHON.find_spans, text)
            assert [t for _, _, t, _ in spans] == (["EMAIL"] if ext in tlds else []), text


_TAGS = ["latest", "next", "beta", "alpha", "canary", "nightly", "rc", "stable", "dev", "edge", "experimental",
         "insiders", "preview", "snapshot", "lts", "main", "master", "LATEST", "Next"]
_EXT_CHAINS = ["zip", "map", "js.map", "tar.gz", "min.js", "zip.csv", "ZIP", "tgz", "exe"]
_PLACES = ["{}", "see {}.", "https://cdn.example.com/dl/{}", "cdn.example.com/{}", "/srv/{}",
           "https://x.example/get?file={}", "file:///home/me/{}", "`{}`", "curl -O {}"]
_ADDRESSES = ["alice@corp.zip", "bob@dev.corp.map", "ops@nightly.app", "a@corp.com.exe", "x@corp.internal"]


def test_generated_tag_files_are_no_address_anywhere_and_addresses_are() -> None:
    rng = random.Random(20261208)
    for _ in range(600):
        place = rng.choice(_PLACES)
        name = f"{rng.choice(['pkg', 'core', 'react-dom', 'a_b', 'v'])}@{rng.choice(_TAGS)}.{rng.choice(_EXT_CHAINS)}"
        spans = assert_same(NATIVE.find_spans, PYTHON.find_spans, place.format(name))
        assert not [s for s in spans if s[2] == "EMAIL"], place.format(name)
        address = rng.choice(_ADDRESSES)
        text = place.format(address) if rng.random() < 0.5 else f"{place.format(name)} to {address}"
        spans = assert_same(NATIVE.find_spans, PYTHON.find_spans, text)
        assert [text[a:b] for a, b, t, _ in spans if t == "EMAIL"] == [address], text


def test_random_domain_shapes_with_tags_and_extensions_agree() -> None:
    labels = ["latest", "LaTeSt", "next", "dev", "main", "rc", "rc1", "nightly", "v2", "163", "corp", "com",
              "zip", "ZIP", "map", "exe", "EXE", "js", "min", "txt", "csv", "gz", "io", "x", "", "-", "a-b"]
    rng = random.Random(1208)
    for _ in range(4000):
        domain = ".".join(rng.choice(labels) for _ in range(rng.randint(1, 5)))
        local = rng.choice(["alice", "pkg", "v2", "a.b", "x+y"])
        place = rng.choice(["{}", "https://h.example/p/{}", "https://h.example/?f={}", "h.example/{}",
                            "postgres://u:Kq2mZ8vT@db.corp.io?to={}", "mailto:{}"])
        assert_same(NATIVE.find_spans, PYTHON.find_spans, place.format(f"{local}@{domain}"))


def test_the_native_lists_hold_no_word_the_twins_lack() -> None:
    # The native kernel files its extensions and dist-tags by first letter, apart from the twin's
    # sets: every label of 2 or 3 letters, and 3,000 of 4, as the last label and as a version.
    rng = random.Random(8)
    letters = "abcdefghijklmnopqrstuvwxyz"
    words = [a + b for a in letters for b in letters] + [a + b + c for a in letters for b in letters for c in letters]
    words += ["".join(rng.choice(letters) for _ in range(4)) for _ in range(3000)]
    for word in words:
        text = f"alice@corp.{word} pkg@{word}.zip"
        assert NATIVE.find_spans(text) == PYTHON.find_spans(text), text
