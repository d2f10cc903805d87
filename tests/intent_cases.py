"""Shared readers for the intent judging sets (tests/data/intent_*.jsonl)."""
from __future__ import annotations

import json
import re
from pathlib import Path


def rows(path: Path) -> list[dict[str, str]]:
    """The JSON lines of ``path``, blank lines skipped."""
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def norm(text: str) -> str:
    """``text`` casefolded to its words, for telling whether two queries are the same query."""
    return " ".join(re.findall(r"[^\W_]+", text.casefold()))
