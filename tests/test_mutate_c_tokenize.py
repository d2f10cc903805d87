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
