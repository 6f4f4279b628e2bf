"""The e2e harness: the local control plane and its node backends, the chart installed on it, and the helpers the
suites in ``e2e/`` share (docs/architecture.md, "e2e"). Nothing here is a test."""
