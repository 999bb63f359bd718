# privcal: two commands on a fresh machine -- `make demo` and `make test`.
# Both create .venv and install privcal with its extras when the venv is missing or stale.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.privcal-installed
EXTRAS ?= torch,federated,bench,dev

.PHONY: demo test test-fast bench lint install clean

install: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# torch first and pinned: pip takes the local CPU wheel, never a CUDA build.
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e ".[$(EXTRAS)]"
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/privcal demo

# two pytest-xdist workers (the 2-core build machine's budget is 15 minutes); tests marked
# xdist_group (the Flower federations, the demo's fixture) stay on one worker
test: $(STAMP)
	$(PY) -m pytest -q -p no:cacheprovider -n 2 --dist loadgroup --durations=25

# the tests not marked slow (tests/README.md), on two workers: under 3 minutes
test-fast: $(STAMP)
	$(PY) -m pytest -q -p no:cacheprovider -n 2 --dist loadgroup -m "not slow"

bench: $(STAMP)
	$(PY) -m bench.run_all

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests bench
	$(VENV)/bin/ruff format --check src tests bench
	$(VENV)/bin/mypy

clean:
	rm -rf $(VENV) privcal-demo .pytest_cache
