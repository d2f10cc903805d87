"""Type stubs of the native query scanner (twin of qdrant_guard._scan_py): one pass over a query
for token counts, repetition and encoded or invisible payloads, each violation with its position."""
from typing import Optional

from ._scan_py import KINDS as KINDS
from ._scan_py import ScanResult as ScanResult
from ._scan_py import Violation as Violation

def scan_query(
    text: str | bytes,
    *,
    max_tokens: Optional[int] = 500,
    max_repetition: Optional[float] = 0.5,
    max_ngram_run: Optional[float] = None,
    encoded_payloads: bool = True,
    max_model_tokens: Optional[int] = None,
    min_blob_len: Optional[int] = 32,
    min_percent_run: Optional[int] = 2,
    max_glued_repetition: Optional[float] = None,
) -> ScanResult: ...

def _fixed3_for_tests(x: float) -> str: ...
