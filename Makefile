# Two commands for a fresh machine: `make demo` and `make test`. `make check` is the edit loop's tier.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test check lint bench docs clean

# torch first, pinned: the 'quality' extra only asks for a range (an engine's image keeps its own
# torch), and an unpinned resolve here would pick the newest CUDA build (GBs). On dev and CI machines
# torch==$(TORCH) resolves to the CPU build; `.[dev]` then keeps it, as it satisfies the range.
TORCH ?= 2.13.0

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q 'torch==$(TORCH)'
	$(BIN)/python -m pip install -q -e '.[dev]'
	touch $(STAMP)

# Two passes (docs/testing.md, "Parallel workers"): the tests on $(WORKERS) pytest-xdist workers, each
# module's tests on one worker and every reader of the quick demo on one; then the `serial` tests
# (tests/conftest.py, SERIAL_MODULES) alone. Exit status 5 (nothing selected, e.g. by a -k in
# PYTEST_ARGS) is not a failure of a pass.
WORKERS ?= 3
PARALLEL := -n $(WORKERS) --dist loadgroup

# every test (what CI runs through .ci/run)
test: $(STAMP)
	$(BIN)/python -m pytest -q $(PARALLEL) -m "not serial" $(PYTEST_ARGS) || [ $$? -eq 5 ]
	$(BIN)/python -m pytest -q -m "serial" $(PYTEST_ARGS) || [ $$? -eq 5 ]

# the fast tier for the edit loop: every test not marked `slow` (the demo, tmux, Chromium, Ray,
# long engine runs, the wheel install; docs/testing.md), under 3 minutes on a 2-core box
check: $(STAMP)
	$(BIN)/python -m pytest -q $(PARALLEL) -m "not slow and not serial" $(PYTEST_ARGS) || [ $$? -eq 5 ]
	$(BIN)/python -m pytest -q -m "serial and not slow" $(PYTEST_ARGS) || [ $$? -eq 5 ]

# ruff on the whole tree; mypy on the product packages ([tool.mypy] in pyproject.toml); the import
# contracts ([tool.importlinter]: the layer order and no circles, docs/architecture.md)
lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/mypy
	$(BIN)/lint-imports

demo: $(STAMP)
	$(BIN)/python -m console.demo

bench: $(STAMP)
	for b in bench/*.py; do echo "== $$b"; $(BIN)/python $$b || exit 1; done

docs: $(STAMP)
	$(BIN)/python -m data.schema > docs/schema.md

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache
