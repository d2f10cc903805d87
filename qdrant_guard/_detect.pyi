"""Type stub of the native secret/PII detector (native/_detect.pyx)."""

FINDING_TYPES: tuple[str, ...]
PII_TYPES: frozenset[str]

def find_spans(text: str) -> list[tuple[int, int, str, str]]: ...
