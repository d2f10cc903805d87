"""scripts/mutate_c.py's C tokenizer reads every native/*.c file (C99 hex floats included)."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))

import mutate_c  # noqa: E402


def test_numbers_are_whole_tokens():
    toks = mutate_c.tokenize("double a = 0x1p52 + 0x1.8p-3 + 1e-12 + 1. + .5f + 0x10u + 2.5e3; if (x < 4) y = 0xffULL;")
    assert [t.text for t in toks if t.kind == "num"] == ["0x1p52", "0x1.8p-3", "1e-12", "1.", ".5f", "0x10u",
                                                          "2.5e3", "4", "0xffULL"]


@pytest.mark.parametrize("source", sorted((ROOT / "native").glob("*.c")), ids=lambda p: p.name)
def test_every_native_file_tokenizes(source):
    # noise.c's 0x1p52 stopped the tool ("cannot tokenize"), so noise.c could not be mutated.
    assert mutate_c.tokenize(source.read_text())


@pytest.mark.parametrize("source", sorted((ROOT / "native").glob("*.h")), ids=lambda p: p.name)
def test_every_native_header_tokenizes(source):
    assert mutate_c.tokenize(source.read_text())


@pytest.mark.parametrize("header, extensions", [("chacha20.h", ["_noise"]), ("aes256ctr.h", ["_noise"]),
                                                 ("noise.h", ["_noise"]), ("scan.h", ["_scan"]),
                                                 ("detect.h", ["_detect"])])
def test_a_header_rebuilds_the_extensions_that_include_it(header, extensions):
    # A mutated header must rebuild every extension compiled with it (chacha20.h reaches _noise
    # through chacha20.c and noise.h), or the mutant would run against the old object.
    assert mutate_c.extensions_of(ROOT / "native" / header, ROOT / "setup.py") == extensions


def test_a_header_inline_function_is_mutated():
    mutants = mutate_c.generate(ROOT / "native" / "chacha20.h", ["qg_stream_u32"])
    assert [(m.original, m.replacement) for m in mutants] == [("==", "!=")]


def test_the_check_option_is_accepted_without_tests(monkeypatch):
    # --list shows the mutants a --check run would judge, without building anything.
    monkeypatch.chdir(ROOT)
    assert mutate_c.main(["native/chacha20.h", "-f", "qg_stream_u32", "--check", "true", "--list"]) == 0
