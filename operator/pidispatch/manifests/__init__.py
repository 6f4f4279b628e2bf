"""Pure manifest builders: plain dicts in, plain dicts out, no I/O."""
