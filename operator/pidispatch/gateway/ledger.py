"""What each job used and was refused, as the gateway saw it (docs/gateway.md#the-ledger).

``Ledger`` is the interface the model path, the forge path and the proxy write to; ``MemoryLedger`` keeps
the figures in this process (one replica, tests). The apiserver-backed ledger (one ConfigMap per Job, one
key per replica) builds on the same figures.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Protocol

from pidispatch.gateway.capability import Claims


@dataclass
class Figures:
    """One job's counts on one replica. Token fields are the provider's own, mapped as pi maps them
    (docs/pi-behaviour.md#usage-mapping): ``input`` excludes cached and cache-written tokens. ``cost`` sums the
    priced replies (US dollars, priced as pi prices them: ``prices.py``); ``unpriced`` counts the billed replies
    whose model had no price, which ``cost`` leaves out."""

    input: int = 0
    output: int = 0
    cache_read: int = 0
    cache_write: int = 0
    requests: int = 0
    refusals: Counter[str] = field(default_factory=Counter)
    cost: float = 0.0
    unpriced: int = 0

    @property
    def tokens(self) -> int:
        """What the budget counts: every token the provider charged for."""
        return self.input + self.output + self.cache_read + self.cache_write

    def add_reply(self, *, input: int, output: int, cache_read: int, cache_write: int, cost: float | None) -> None:
        """One reply's figures; ``cost`` ``None``: its model had no price (a reply of no tokens costs nothing)."""
        self.input += input
        self.output += output
        self.cache_read += cache_read
        self.cache_write += cache_write
        self.requests += 1
        if cost is not None:
            self.cost += cost
        elif input + output + cache_read + cache_write > 0:
            self.unpriced += 1

    def add(self, other: Figures) -> None:
        """``other``'s counts added to these (another replica's, or this one's before a restart)."""
        self.input += other.input
        self.output += other.output
        self.cache_read += other.cache_read
        self.cache_write += other.cache_write
        self.requests += other.requests
        self.refusals.update(other.refusals)
        self.cost += other.cost
        self.unpriced += other.unpriced

    def to_json(self) -> dict[str, Any]:
        return {"input": self.input, "output": self.output, "cacheRead": self.cache_read,
                "cacheWrite": self.cache_write, "requests": self.requests, "refusals": dict(self.refusals),
                "cost": round(self.cost, 10), "unpriced": self.unpriced}

    @classmethod
    def from_json(cls, data: Any) -> Figures:
        if not isinstance(data, dict):
            return cls()
        def number(name: str) -> int:
            value = data.get(name)
            return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0
        cost = data.get("cost")
        refusals = data.get("refusals")
        return cls(input=number("input"), output=number("output"), cache_read=number("cacheRead"),
                   cache_write=number("cacheWrite"), requests=number("requests"),
                   refusals=Counter({str(k): v for k, v in refusals.items() if isinstance(v, int)})
                   if isinstance(refusals, dict) else Counter(),
                   cost=float(cost) if isinstance(cost, (int, float)) and not isinstance(cost, bool) and cost >= 0
                   else 0.0,
                   unpriced=number("unpriced"))


class Ledger(Protocol):
    async def used(self, claims: Claims) -> int:
        """Tokens the job has used so far, across replicas."""
        ...

    async def record_usage(self, claims: Claims, *, input: int, output: int, cache_read: int,
                           cache_write: int, cost: float | None) -> None:
        """One reply's figures; ``cost`` ``None`` when its model had no price."""
        ...

    async def record_refusal(self, claims: Claims, reason: str) -> None:
        """One refusal; ``reason`` is a protocol reason or, for the proxy, ``host-not-allowed:<host>``."""
        ...


class MemoryLedger:
    """Figures in this process only."""

    def __init__(self) -> None:
        self.figures: dict[str, Figures] = {}

    def _of(self, claims: Claims) -> Figures:
        return self.figures.setdefault(claims.uid, Figures())

    async def used(self, claims: Claims) -> int:
        return self._of(claims).tokens

    async def record_usage(self, claims: Claims, *, input: int, output: int, cache_read: int,
                           cache_write: int, cost: float | None) -> None:
        self._of(claims).add_reply(input=input, output=output, cache_read=cache_read, cache_write=cache_write,
                                   cost=cost)

    async def record_refusal(self, claims: Claims, reason: str) -> None:
        self._of(claims).refusals[reason] += 1
