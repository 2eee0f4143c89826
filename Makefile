# Two entry points matter: `make run` (serve the adapter locally with the bundled model) and
# `make test` (the whole suite). Both create and fill the virtual environment when needed;
# `make test` also installs the pinned CDK CLI (npm ci), which one test synthesizes through.
VENV    ?= .venv
PYTHON  := $(VENV)/bin/python
HOST    ?= 127.0.0.1
PORT    ?= 8080
export PYTHONPATH := $(CURDIR)/container:$(CURDIR)

.PHONY: run test bench synth mutation clean

$(VENV)/.runtime: requirements.txt container/requirements.txt
	test -x $(PYTHON) || python3 -m venv $(VENV)
	$(PYTHON) -m pip install --quiet --upgrade pip==24.3.1
	$(PYTHON) -m pip install --quiet -r requirements.txt
	touch $@

$(VENV)/.dev: requirements-dev.txt $(VENV)/.runtime
	$(PYTHON) -m pip install --quiet -r requirements-dev.txt
	touch $@

run: $(VENV)/.runtime
	HOST=$(HOST) PORT=$(PORT) $(PYTHON) -m decision_adapter serve

test: $(VENV)/.dev node_modules/.package-lock.json
	$(PYTHON) -m pytest

bench: $(VENV)/.dev
	$(PYTHON) -m bench

# Mutation testing of the groups in pyproject.toml [tool.mutation.groups]; minutes, not in CI.
# Writes tests/mutation/results.json: make mutation MUTATION_MODULES="ops" MUTATION_JOBS=4
MUTATION_MODULES ?=
MUTATION_JOBS    ?= 2
mutation: $(VENV)/.dev
	$(PYTHON) -m tests.mutation.harness --max-children $(MUTATION_JOBS) $(MUTATION_MODULES)

node_modules/.package-lock.json: package.json package-lock.json
	npm ci --no-audit --no-fund

# CloudFormation templates into cdk.out/, offline, with the CDK CLI pinned in package.json.
# Endpoints appear once build outputs are given: make synth CDK_ARGS='-c modelDataUri=...'
synth: $(VENV)/.runtime node_modules/.package-lock.json
	PATH="$(abspath $(VENV))/bin:$$PATH" CDK_DISABLE_CLI_TELEMETRY=true \
	JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION=20 \
	npx --no-install cdk synth --quiet --no-notices $(CDK_ARGS)

clean:
	rm -rf $(VENV) cdk.out .pytest_cache node_modules mutants
