# pi-dispatch operator — developer entry points.
#   make test           build the local control plane (cached), install pi, run all tests
#   make unit           the fast tier: tests/ without the real pi (no control plane running, no images)
#   make typecheck      mypy over operator/ (pyproject.toml [tool.mypy]; part of make test and make unit)
#   make pi             install the real pi CLI pinned by e2e/pi/package-lock.json (e2e/pi/node_modules/.bin/pi)
#   make transcripts    regenerate the pi session samples of the tests (tests/data/transcripts/pi-<version>/)
#   make github-schemas GitHub's REST description and webhook schemas, pinned (docs/github-contracts.md)
#   make cluster-up     start etcd + kube-apiserver + kube-controller-manager + test kubelet
#   make cluster-down   stop it
#   make images         build the operator and job images here, no registry needed (e2e/images/build.sh)
#   make node           the Debian packages a real node needs (containerd, runc, CNI plugins, iptables)
#   make tools          the host tools the e2e tests run directly (git, gh)
#   make docs           regenerate docs/reference/ and build the documentation site into site/ (strict)
#   make release-rehearsal  the release workflow's steps here: push, SBOM, sign, verify, install from the registry
# See docs/control-plane.md, docs/testing.md and docs/releasing.md.

SHELL := /bin/bash
PYTHON ?= python3.11
VENV := .venv
VPY := $(VENV)/bin/python
# Extra pytest flags: make test PYTEST_ARGS='-x -k harness'
PYTEST_ARGS ?=
PYTEST ?= $(VPY) -m pytest $(PYTEST_ARGS)
MYPY := $(VENV)/bin/mypy
CONTROLPLANE_BUILD := e2e/controlplane/build.sh
PI_DIR := e2e/pi
PI_BIN := $(PI_DIR)/node_modules/.bin/pi
GITHUB_SCHEMAS_DIR := testkit/github-schemas

.PHONY: help venv controlplane pi github-schemas images node tools cluster-up cluster-down cluster-status test unit typecheck demo demo-store bench bench-operator transcripts docs

help:
	@echo "targets: demo demo-store test unit typecheck fuzz transcripts docs venv controlplane pi github-schemas images node tools cluster-up cluster-down cluster-status bench release-rehearsal"

# Stamp-based: reinstalls only when the install inputs change (setup.py builds the one C module).
$(VENV)/.installed: pyproject.toml setup.py operator/pidispatch/transcript/_needles.c
	test -x $(VPY) || $(PYTHON) -m venv $(VENV)
	$(VPY) -m pip install --quiet --upgrade pip
	$(VPY) -m pip install --quiet -e '.[test]'
	touch $@

venv: $(VENV)/.installed

# Builds kube-apiserver, kube-controller-manager, kubectl, etcd, helm into
# ~/.cache/pidispatch/<pinned versions>/bin (no-op when cached).
controlplane:
	$(CONTROLPLANE_BUILD)

# The real pi CLI for the tests, pinned by e2e/pi/package-lock.json. Stamp-based: npm ci runs only when
# package.json or the lock changes; then the installed binary must report the pinned version.
$(PI_DIR)/node_modules/.installed: $(PI_DIR)/package.json $(PI_DIR)/package-lock.json
	@command -v node >/dev/null && command -v npm >/dev/null || \
	  { echo "make pi: node and npm not found; pi 0.73.1 needs Node.js >= 20.6 (e.g. the nodejs 20 package)" >&2; exit 1; }
	@v="$$(node -p process.versions.node)"; [ "$$(printf '%s\n' 20.6.0 "$$v" | sort -V | head -1)" = 20.6.0 ] || \
	  { echo "make pi: Node.js $$v is too old; pi 0.73.1 needs >= 20.6 (its package.json engines)" >&2; exit 1; }
	npm ci --prefix $(PI_DIR) --no-audit --no-fund
	@want="$$(node -p 'require("./$(PI_DIR)/package.json").dependencies["@mariozechner/pi-coding-agent"]')"; \
	  got="$$($(PI_BIN) --version </dev/null 2>&1 | tail -1)"; \
	  [ "$$got" = "$$want" ] || { echo "make pi: $(PI_BIN) --version says '$$got', expected $$want" >&2; exit 1; }; \
	  echo "pi $$got at $(PI_BIN)"
	touch $@

pi: $(PI_DIR)/node_modules/.installed

# The pi session samples the transcript and store tests read, tests/data/transcripts/pi-<pinned pi>/: written by
# running the pinned pi against the scripted model (testkit/gen_transcripts.py); rerun after a pi bump and commit.
transcripts: venv pi
	$(VPY) -m testkit.gen_transcripts

# GitHub's published descriptions the fake forge and the webhook payloads are held to: @octokit/openapi (the REST
# API's OpenAPI description) and @octokit/webhooks-schemas, pinned by testkit/github-schemas/package-lock.json
# (docs/github-contracts.md). Stamp-based like `pi`: npm ci runs only when package.json or the lock changes.
$(GITHUB_SCHEMAS_DIR)/node_modules/.installed: $(GITHUB_SCHEMAS_DIR)/package.json $(GITHUB_SCHEMAS_DIR)/package-lock.json
	@command -v npm >/dev/null || { echo "make github-schemas: npm not found (Debian's npm package)" >&2; exit 1; }
	npm ci --prefix $(GITHUB_SCHEMAS_DIR) --no-audit --no-fund --ignore-scripts
	touch $@

github-schemas: $(GITHUB_SCHEMAS_DIR)/node_modules/.installed

# The Dockerfile's operator and job images, built with no registry from local Debian and Node bases
# (cached under ~/.cache/pidispatch/images; nothing is rebuilt when the inputs are unchanged). Needs root.
# Checked by `pytest -m images` (e2e/test_images.py).
images:
	bash e2e/images/build.sh

# Debian packages a target needs, installed when missing and root; otherwise it says what is missing and what
# follows. $(call apt_ensure,<what>,<packages>,<what follows when not root>)
define apt_ensure
@missing=""; for p in $(2); do dpkg-query -W -f='$${Status}' $$p 2>/dev/null | \
  grep -q '^install ok installed$$' || missing="$$missing $$p"; done; \
if [ -z "$$missing" ]; then echo "$(1): present"; \
elif [ "$$(id -u)" = 0 ]; then echo "$(1): installing$$missing"; apt-get update -qq && \
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing; \
else echo "$(1) missing:$$missing (not root: $(3))"; fi
endef

# The packages of a real node (e2e/framework/realnode.py: `ip` is iproute2's; ipset for its NetworkPolicy implementation, e2e/framework/netpolicy.py):
# installed when missing and root; otherwise the real-node tests say what is missing and are skipped
# (PIDISPATCH_REQUIRE_REAL_NODE=1 makes that a failure, as in CI).
NODE_PACKAGES := containerd runc containernetworking-plugins iptables iproute2 ipset gcc libc6-dev
node:
	$(call apt_ensure,node packages,$(NODE_PACKAGES),the real-node tests will be skipped)

# The host tools the end-to-end tests run directly (e2e/framework/hosttools.py): job Pods on the test kubelet use this
# machine's git and gh, as the job image carries its own. Installed when missing and root; otherwise the tests that
# need them say what is missing and are skipped (under CI, CI=true, they fail instead).
HOST_TOOLS := git gh
.PHONY: tools
tools:
	$(call apt_ensure,host tools,$(HOST_TOOLS),the tests that run them will be skipped)

# The release rehearsed on this machine (e2e/framework/rehearsal.py, docs/releasing.md): .github/workflows/release.yml's steps
# against a registry on loopback (both images pushed by digest, an SBOM of each, cosign signatures and SPDX
# attestations with a key pair of the run, the chart pushed as an OCI artifact and signed), every signature
# verified, then the quickstart (docs/quickstart.md) installed from that registry on a real node given no image, and one job
# run to Succeeded. Needs root; e2e/test_release_rehearsal.py runs the same.
.PHONY: release-rehearsal
release-rehearsal: venv controlplane images node
	$(VPY) -m e2e.framework.rehearsal

# NODE=auto (default): a real node (containerd + runc, the images of `make images`) when this machine can run
# one (root, the packages of `make node`), else the test kubelet; NODE=real or NODE=test to choose; NODE=multi:
# three test kubelets and the real kube-scheduler (e2e/framework/multinode.py).
NODE ?= auto
cluster-up: venv controlplane
	@if [ "$(NODE)" != test ] && [ "$(NODE)" != multi ] && [ "$$(id -u)" = 0 ]; then $(MAKE) --no-print-directory images node; fi
	$(VPY) -m e2e.framework.cluster up --node $(NODE)

cluster-down: venv
	$(VPY) -m e2e.framework.cluster down

cluster-status: venv
	$(VPY) -m e2e.framework.cluster status

# The layering contracts first (.importlinter: store/ and transcript/ know no Kubernetes, the runner only
# the container contract, ...), ruff's checks ([tool.ruff] in pyproject.toml) and mypy's (`typecheck`),
# then every test.
test: venv controlplane pi github-schemas images node tools
	$(VENV)/bin/lint-imports --no-cache
	$(VENV)/bin/ruff check --no-cache .
	$(MAKE) --no-print-directory lint-workflows
	$(MYPY)
	$(PYTEST)

# mypy over operator/ ([tool.mypy] in pyproject.toml: strict for the store, the transcript and the API types).
typecheck: venv
	$(MYPY)

# The GitHub Actions workflows (.github/workflows: the release, CI) through the pinned actionlint, which
# `make controlplane` builds into its bin dir; shellcheck and pyflakes off, so the result does not depend on
# what else is on PATH. tests/test_workflows.py runs the same and proves it fails on broken workflows.
.PHONY: lint-workflows
lint-workflows: controlplane
	"$$($(CONTROLPLANE_BUILD) --print-bin-dir)/actionlint" -shellcheck= -pyflakes= .github/workflows/*.yml

# The chart's Grafana dashboard through dashcheck (Grafana's dashboard schema as the foundation SDK's Go types,
# strict), which `make controlplane` builds; tests/chart/test_chart_dashboard.py runs the same on the rendered ConfigMap.
.PHONY: lint-dashboards
lint-dashboards: controlplane
	"$$($(CONTROLPLANE_BUILD) --print-bin-dir)/dashcheck" charts/pi-dispatch/dashboards/*.json

# The fast tier: the layering contracts, ruff, and every test in tests/ but those marked `pi` (they run the
# real pi). Nothing is started: no control plane, no kubelet, no images; `controlplane` only builds (cached)
# the pinned helm the chart tests render with. The e2e/ tests and `make test` are the whole suite.
unit: venv controlplane github-schemas
	$(VENV)/bin/lint-imports --no-cache
	$(VENV)/bin/ruff check --no-cache .
	$(MYPY)
	$(PYTEST) -m 'not pi' tests

# The operator end to end on the local control plane: helm install, a Trigger, two Jobs (cold, then resumed).
demo: cluster-up pi github-schemas
	bash demo/operator-demo.sh

# The documentation site: the generated reference pages (docs/reference/, from the API models and the chart's values;
# tools/docsgen) written afresh, then `mkdocs build --strict` into site/, which fails on a broken link, a missing anchor
# or a page left out of mkdocs.yml's nav. tests/docs/test_docs_site.py and tests/docs/test_docs_reference.py check the same.
docs: venv
	$(VPY) -m tools.docsgen
	NO_MKDOCS_2_WARNING=1 $(VPY) -m mkdocs build --strict

# The session store alone, walked through with the pidispatch CLI (no cluster needed).
demo-store: venv
	bash demo/store-demo.sh

# Store and command start-up benchmarks (not tests); results go to docs/benchmarks.md.
bench: venv pi
	$(VPY) bench/store.py
	$(VPY) bench/cli.py
	$(VPY) bench/rethread.py

# The transcript readers, then the webhook receiver (unsigned, malformed, hostile deliveries through the real
# handler), each fuzzed with 1 000 000 seeded inputs (FUZZ_ARGS='-n 20000 --seed 7'); docs/reliability.md.
.PHONY: fuzz
FUZZ_ARGS ?=
fuzz: venv github-schemas
	$(VPY) tests/fuzz_transcript.py $(FUZZ_ARGS)
	$(VPY) -m tests.fuzz_webhook $(FUZZ_ARGS)  # a module: it imports testkit from the repository root

# Operator benchmarks (not tests): a fresh local control plane, the chart, Pod latency, API writes
# per job, a 500-Job burst; one Pod create from our client against client-go's (JSON and protobuf,
# printed); then the store reaper over 100 000 keys, and the Resumable refresh over 100 000 keys and
# SessionKeys (its own control plane). Figures go to docs/benchmarks.md.
bench-operator: venv controlplane
	$(VPY) bench/operator.py --svg docs/bench-drain.svg
	$(VPY) bench/podpost.py
	$(VPY) bench/reaper.py
	$(VPY) bench/refresh.py
