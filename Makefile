# qdrant_guard — every target sets itself up on a fresh machine (venv, native build, deps).
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.deps-stamp
EVAL_STAMP := $(VENV)/.eval-stamp
export HF_HUB_OFFLINE := 1

.PHONY: all build demo test test-fast bench fuzz eval typecheck clean

all: test

$(STAMP): pyproject.toml setup.py
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q "setuptools>=77" wheel "Cython>=3.0" "numpy>=1.26"
	$(PY) -m pip install -q --no-build-isolation -e '.[test]'
	touch $(STAMP)

$(EVAL_STAMP): $(STAMP) scripts/install_eval_deps.sh
	PYTHON=$(PY) bash scripts/install_eval_deps.sh
	touch $(EVAL_STAMP)

# The native kernels are required: a compiler or Cython error fails here, loudly.
build: $(STAMP)
	$(PY) setup.py -q build_ext --inplace
	$(PY) -c "import qdrant_guard._noise, qdrant_guard._scan, qdrant_guard._detect; import qdrant_guard as q; assert q.implementation() == 'native'; print('native kernels: OK')"

demo: build
	$(PY) -m qdrant_guard.cli demo

# The whole suite, against the native build (tests/conftest.py refuses a silent Python fallback).
test: build $(EVAL_STAMP) typecheck
	QDRANT_GUARD_REQUIRE_NATIVE=1 $(PY) -m pytest -q -p no:cacheprovider -n auto --dist loadfile tests

test-fast: build
	QDRANT_GUARD_REQUIRE_NATIVE=1 $(PY) -m pytest -q -x -n auto --dist loadfile -m "not slow and not eval" tests

bench: build
	$(PY) -m pip install -q -e '.[bench]' --no-build-isolation
	$(PY) bench/run.py

# mypy --strict over the whole package (its internal modules too; pyproject.toml's [tool.mypy] only
# lets optional untyped third-party imports be Any), then on a usage file of the public API (types
# come from py.typed and the .pyi stubs). The same flags for both, so they share .mypy_cache (other
# flags invalidate it); every module of the package is named, so "silent" quiets only third-party code.
typecheck: build
	$(PY) -m mypy --strict --follow-imports=silent qdrant_guard
	$(PY) -m mypy --strict --follow-imports=silent tests/typing_usage.py
	$(PY) tests/typing_usage.py

eval: build $(EVAL_STAMP)
	$(PY) -m qdrant_guard.cli eval --out docs/eval-report

# libFuzzer + ASan/UBSan on the C kernels, 60 s per target (needs clang-14 + libclang-rt-14-dev).
fuzz:
	bash scripts/fuzz_ci.sh 60

clean:
	rm -rf build $(VENV) qdrant_guard/*.so native/_noise.c native/_scan.c native/_detect.c
