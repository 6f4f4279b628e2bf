"""The operator's event path, kind-agnostic: one keyed, rate-limited workqueue (docs/architecture.md#event-path)."""
