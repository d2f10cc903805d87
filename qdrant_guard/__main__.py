"""``python -m qdrant_guard``: the ``qdrant-guard`` command, for when the venv's bin is not on PATH."""
import sys

from .cli import main

sys.exit(main())
