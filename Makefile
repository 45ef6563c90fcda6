# `make run` and `make test` each set up a fresh machine by themselves:
# a virtual environment in .venv, ncsim installed into it (editable) with the pinned versions,
# then `ncsim warmup`: numba compiles ncsim's kernels once (up to half a minute) into the
# __pycache__ folders beside the sources, so that every later run starts at once.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp

.PHONY: run test lint docs warmup clean

$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c constraints.txt -e '.[test,torch,sweep]'
	$(BIN)/ncsim warmup
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/ncsim run programs/giou.s --trace

test: $(STAMP)
	$(BIN)/ruff check ncsim tests tools programs
	$(BIN)/python -m pytest -q

lint: $(STAMP)
	$(BIN)/ruff check ncsim tests tools

warmup: $(STAMP)
	$(BIN)/ncsim warmup

docs: $(STAMP)
	$(BIN)/python tools/gen_isa_doc.py

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .hypothesis
