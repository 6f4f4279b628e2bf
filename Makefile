# pi-dispatch operator — developer entry points.
#   make test           build the local control plane (cached), run all tests
#   make cluster-up     start etcd + kube-apiserver + kube-controller-manager + test kubelet
#   make cluster-down   stop it
# See README.md, "Local control plane".

SHELL := /bin/bash
PYTHON ?= python3.11
VENV := .venv
VPY := $(VENV)/bin/python
# Extra pytest flags: make test PYTEST_ARGS='-x -k harness'
PYTEST_ARGS ?=
PYTEST ?= $(VPY) -m pytest $(PYTEST_ARGS)
CONTROLPLANE_BUILD := e2e/controlplane/build.sh

.PHONY: help venv controlplane cluster-up cluster-down cluster-status test demo demo-store bench

help:
	@echo "targets: demo demo-store test venv controlplane cluster-up cluster-down cluster-status bench"

# Stamp-based: reinstalls only when pyproject.toml changes.
$(VENV)/.installed: pyproject.toml
	test -x $(VPY) || $(PYTHON) -m venv $(VENV)
	$(VPY) -m pip install --quiet --upgrade pip
	$(VPY) -m pip install --quiet -e '.[test]'
	touch $@

venv: $(VENV)/.installed

# Builds kube-apiserver, kube-controller-manager, kubectl, etcd, helm into
# ~/.cache/pidispatch/<pinned versions>/bin (no-op when cached).
controlplane:
	$(CONTROLPLANE_BUILD)

cluster-up: venv controlplane
	$(VPY) -m e2e.cluster up

cluster-down: venv
	$(VPY) -m e2e.cluster down

cluster-status: venv
	$(VPY) -m e2e.cluster status

test: venv controlplane
	$(PYTEST)

# The operator end to end on the local control plane: helm install, a Trigger, two Jobs (cold, then resumed).
demo: cluster-up
	bash demo/operator-demo.sh

# The session store alone, walked through with the pidispatch CLI (no cluster needed).
demo-store: venv
	bash demo/store-demo.sh

# Store benchmark (not a test); results go to docs/benchmarks.md.
bench: venv
	$(VPY) bench/store.py
