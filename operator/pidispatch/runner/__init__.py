"""The job image's side of the container contract (docs/architecture.md#container-contract,
docs/store-contract.md#runner-side).

`pidispatch runner` checks the `/session` mount, makes the staged transcript safe to hand to pi,
checks that the pi it runs is the version the Trigger declared, runs pi once, measures context use and
writes one JSON report to the termination message. Functional core, thin shell:

- `config`  env → `RunnerConfig` (pure): names, defaults, strict parsing; exit codes
- `mount`   mount readiness: an ordered chain of checks over gathered facts
- `session` normalisation of the session file (pure `normalise`) and its application (`open_session`)
- `version` the declared-vs-reported pi version decision (pure)
- `prompt`  the first-delivery briefing and the resume envelope (pure)
- `pi`      the pi command line, its environment, `pi --version`, the run
- `report`  this run's usage, context measurement, the report object and its encoding (pure)
- `main`    the steps in order
"""
