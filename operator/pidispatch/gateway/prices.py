"""What a reply cost, priced as pi prices it (docs/gateway.md#cost).

pi puts a cost on each reply from its model's prices (``calculateCost`` in ``@mariozechner/pi-ai``: each kind of
token at its price per million, in US dollars). The gateway does the same from the same prices, so the cost it
records equals the transcript's, and no longer comes from a file the agent can write:

* pi's built-in models: ``prices.json``, pi's own table for the providers the gateway serves, written from the
  installed pi by ``python -m tools.piprices`` (``tests/gateway/test_gateway_prices.py`` holds it to that pi);
* a deployment's ``models.json`` (the chart's ``job.modelsConfigMap``): each listed model's ``cost``, as pi reads
  it; such a price counts even when it is 0 (a free model), as the runner's report counts it.

A reply is **unpriced** when its model has no price: not in either table, or a built-in whose prices are all 0
(pi writes cost 0 for a model it has no prices for, which is not the same as free). The job's cost is then a
partial sum, and the operator shows none (``status.tokens.unpriced`` says how many replies are missing).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from typing import Any

PER = 1_000_000  # prices are per million tokens


@dataclass(frozen=True)
class Price:
    """US dollars per million tokens of each kind, as pi's ``cost`` object has them."""

    input: float
    output: float
    cache_read: float
    cache_write: float

    def of(self, *, input: int, output: int, cache_read: int, cache_write: int) -> float:
        """What those tokens cost: pi's ``calculateCost``."""
        return (self.input * input + self.output * output + self.cache_read * cache_read
                + self.cache_write * cache_write) / PER


PriceTable = Mapping[str, Mapping[str, Price]]  # provider -> model id -> price


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0 or value != value:
        return None
    return float(value)


def builtin_prices() -> dict[str, dict[str, Price]]:
    """pi's prices for its built-in models (``prices.json``), leaving out the all-zero ones: a model pi has no
    prices for is unpriced, not free."""
    raw = json.loads(resources.files("pidispatch.gateway").joinpath("prices.json").read_text(encoding="utf-8"))
    table: dict[str, dict[str, Price]] = {}
    for provider, models in raw.items():
        table[provider] = {model: Price(*map(float, figures)) for model, figures in models.items()
                           if any(figures)}
    return table


def models_json_prices(data: Any) -> dict[str, dict[str, Price]]:
    """The prices a parsed ``models.json`` gives (pi's format: ``providers.<name>.models[].cost``). A model
    whose ``cost`` is not an object of non-negative numbers is left unpriced; a missing kind is 0, as in pi."""
    providers = data.get("providers") if isinstance(data, dict) else None
    table: dict[str, dict[str, Price]] = {}
    for provider, config in providers.items() if isinstance(providers, dict) else ():
        listed = config.get("models") if isinstance(config, dict) else None
        for model in listed if isinstance(listed, list) else []:
            if not isinstance(model, dict) or not isinstance(model.get("id"), str):
                continue
            cost = model.get("cost")
            if not isinstance(cost, dict):
                continue
            figures = [_number(cost.get(kind, 0)) for kind in ("input", "output", "cacheRead", "cacheWrite")]
            if any(f is None for f in figures):
                continue
            table.setdefault(str(provider), {})[model["id"]] = Price(*(f or 0.0 for f in figures))
    return table


def price_table(models_json: Any = None) -> dict[str, dict[str, Price]]:
    """pi's built-in prices with a deployment's ``models.json`` (parsed) laid over them, model by model."""
    table = builtin_prices()
    for provider, models in models_json_prices(models_json).items():
        table[provider] = {**table.get(provider, {}), **models}
    return table


def price_table_file(path: str | None) -> dict[str, dict[str, Price]]:
    """``price_table`` with the ``models.json`` at ``path`` (``providers.load_models_file`` has already refused
    one that cannot be read or parsed)."""
    if not path:
        return price_table()
    with open(path, encoding="utf-8") as handle:
        return price_table(json.loads(handle.read()))


def price_of(table: PriceTable, provider: str, model: str | None) -> Price | None:
    """The price of ``provider``'s ``model``, or ``None`` (no model named, or none priced)."""
    return table.get(provider, {}).get(model) if model else None


def requested_model(body: bytes) -> str | None:
    """The model a request names (its JSON body's ``model``, as each of the three wire APIs carries it), or
    ``None`` when the body says none the gateway can read."""
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):
        return None
    model = data.get("model") if isinstance(data, dict) else None
    return model if isinstance(model, str) and model else None
