"""The scanner's token table against tokens that collide in an unkeyed multiplicative hash.

Tokens of up to 8 bytes that differ only in their last bytes (order numbers, user ids) differ only
in the high bits of the table key; a multiply that keeps the low half of the product leaves those
bits out of the slot, so every such token landed in one probe cluster and the scan went quadratic
(8,000 of them: 2,294 slots stepped per token, 22 ms). The keyed hash spreads them, for every key:
each family is scanned by 20 processes, each with its own key, through both of the scanner's
hashes: AES rounds in the AVX2 variant, folded multiplies in the generic one (QG_SCAN_GENERIC).
The C harness reports the table's probe count, a diagnostic the Python API does not expose; it is
built with QG_SCAN_TEST_KEY, so a test can also replay a given key (QG_SCAN_KEY).
"""
from __future__ import annotations

import os
import random
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def probes_exe(tmp_path_factory):
    cc = shutil.which("gcc") or shutil.which("cc")
    if cc is None:
        pytest.skip("no C compiler")
    exe = tmp_path_factory.mktemp("scan") / "scan_probes"
    subprocess.run([cc, "-O2", "-std=gnu99", "-DQG_SCAN_TEST_KEY", f"-I{ROOT / 'native'}", str(ROOT / "tests" / "c" / "scan_probes.c"),
                    str(ROOT / "native" / "scan.c"), "-o", str(exe)], check=True)
    return exe


VARIANTS = {"dispatched": {}, "generic": {"QG_SCAN_GENERIC": "1"}}


def _scan(exe, text: str, variant: str = "dispatched", key: str | None = None) -> tuple[int, int, int]:
    env = {k: v for k, v in os.environ.items() if k not in ("QG_SCAN_GENERIC", "QG_SCAN_KEY")} | VARIANTS[variant]
    if key is not None:
        env["QG_SCAN_KEY"] = key
    out = subprocess.run([str(exe)], input=text.encode(), capture_output=True, check=True, env=env).stdout
    tokens, distinct, probes = map(int, out.split())
    return tokens, distinct, probes


def _families():
    rng = random.Random(7)
    chars = [chr(c) for c in range(0x21, 0x7F)]
    yield "shared 6-byte prefix", ["abcdef" + rng.choice(chars) + rng.choice(chars) for _ in range(8000)]
    yield "order numbers", [f"ORD{i:05d}" for i in range(8000)]
    yield "7-byte ids", [f"u{i:06d}" for i in range(8000)]
    yield "16-byte ids", [f"customer-{i:07d}" for i in range(8000)]
    # Over 16 bytes, differing only past byte 16: the hashes' per-chunk rounds must spread these too.
    yield "35-byte URLs", [f"https://example.com/orders/{i:08d}" for i in range(8000)]
    yield "34-byte URLs", [f"https://example.com/o/{i:012d}" for i in range(8000)]


@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("name, words", list(_families()), ids=[n for n, _ in _families()])
def test_tokens_differing_in_their_high_bytes_do_not_cluster(probes_exe, name, words, variant):
    # Each run is a new process with a new key: the bound must hold for every key, not a lucky one.
    for _ in range(20):
        tokens, distinct, probes = _scan(probes_exe, " ".join(words), variant)
        assert tokens == len(words) and distinct == len(set(words))
        # Linear probing at most half full averages well under one extra slot per lookup.
        assert probes / tokens < 2.0, (name, probes / tokens)


# Keys under which the generic hash once clustered these URLs (2.2 to 5.8 slots stepped per token,
# found by scanning 1,500 random keys): its tail multiplies by a key-derived constant, and without a
# fixed multiply to finish, about 1 key in 130 left the last digits' differences in the high bits.
CLUSTERING_KEYS = [
    "132e45e8e98153cc 6a2fe5b8bc590800 79e0854ffa75fc58 7c90c729590f9893",
    "cdfcd5f250a3ce24 3ea883cfb2c394f5 3793c7b874db7338 97187d3db656eef8",
    "38e724406d871d3b 45ee06b328cb7c15 fc2bedf2a20c22fb b3db911bd688633a",
    "4b28702faf223979 d4173a6fe8985c14 408322ce049ec8b1 a5f45f54a961645e",
]


@pytest.mark.parametrize("key", CLUSTERING_KEYS)
@pytest.mark.parametrize("pattern", ["https://example.com/orders/{:08d}", "https://example.com/o/{:012d}"])
def test_keys_that_once_clustered_long_tokens_spread_them(probes_exe, key, pattern):
    words = [pattern.format(i) for i in range(8000)]
    tokens, distinct, probes = _scan(probes_exe, " ".join(words), "generic", key)
    assert tokens == distinct == 8000
    assert probes / tokens < 2.0, probes / tokens


def test_the_harness_uses_the_key_it_is_given(probes_exe):
    # Replaying a key only tests something if the key is really used: a given key always gives the
    # same probe count, while fresh keys from the OS give different ones.
    words = " ".join(f"https://example.com/orders/{i:08d}" for i in range(2000))
    assert len({_scan(probes_exe, words, "generic", CLUSTERING_KEYS[0])[2] for _ in range(3)}) == 1
    assert len({_scan(probes_exe, words, "generic")[2] for _ in range(5)}) > 1


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_random_words_for_comparison(probes_exe, variant):
    rng = random.Random(8)
    words = ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(3, 12))) for _ in range(8000)]
    tokens, distinct, probes = _scan(probes_exe, " ".join(words), variant)
    assert tokens == 8000 and distinct == len(set(words)) and probes / tokens < 2.0


def test_tokens_with_the_same_padded_bytes_stay_distinct(tmp_path):
    """A short token's key in the small table is its 16 zero-padded bytes, which "ab", "ab\\0" and
    "ab\\0\\0" share: only tokens without a NUL byte are keyed so. The harness scans 40,000 texts
    of such triples (tables sized down, so tokens share probe chains often) in both variants, and
    checks that the shared index holds no slot and no key byte after each scan."""
    cc = shutil.which("gcc") or shutil.which("cc")
    if cc is None:
        pytest.skip("no C compiler")
    exe = tmp_path / "scan_short_keys"
    subprocess.run([cc, "-O2", "-std=gnu99", f"-I{ROOT / 'native'}", str(ROOT / "tests" / "c" / "scan_short_keys.c"),
                    str(ROOT / "native" / "scan.c"), "-o", str(exe)], check=True)
    for variant in VARIANTS.values():
        env = {k: v for k, v in os.environ.items() if k != "QG_SCAN_GENERIC"} | variant
        wrong, probes, left = map(int, subprocess.run([str(exe)], capture_output=True, check=True,
                                                      env=env).stdout.split())
        assert probes > 1000  # tokens met in probe chains: the check below is not vacuous
        assert wrong == 0
        assert left == 0
