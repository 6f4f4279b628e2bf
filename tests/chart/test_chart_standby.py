"""What values.yaml promises of a standby operator is what the leader election does (``pidispatch/election/leader.py``).

A lost leader is replaced once the standby, polling every ``retry_seconds``, has seen the Lease unchanged for
``lease_seconds`` by its own clock: it notices the last renewal up to one poll late and the expiry up to one poll
late, so 15–19 s after that renewal with the operator's durations, not "within the lease". A planned stop releases
the Lease, which the standby takes at its next poll.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from pidispatch.election.leader import LeaseConfig

ROOT = Path(__file__).resolve().parents[2]


def replicas_comment() -> str:
    """The comment above ``replicas:`` in values.yaml, as one line."""
    lines = (ROOT / "charts" / "pi-dispatch" / "values.yaml").read_text().splitlines()
    end = lines.index("replicas: 1")
    start = end
    while start > 0 and lines[start - 1].startswith("#"):
        start -= 1
    return " ".join(line.lstrip("# ") for line in lines[start:end])


def operator_lease() -> LeaseConfig:
    """The LeaseConfig the operator runs with: ``handlers/main.py`` passes no duration, so the defaults."""
    main = ast.parse((ROOT / "operator" / "pidispatch" / "handlers" / "main.py").read_text())
    [call] = [n for n in ast.walk(main) if isinstance(n, ast.Call) and getattr(n.func, "id", None) == "LeaseConfig"]
    assert {k.arg for k in call.keywords} == {"namespace", "name", "identity"}, "the durations are the defaults"
    return LeaseConfig(namespace="ns", name="lease", identity="me")


def test_the_values_say_the_takeover_the_election_gives() -> None:
    lease = operator_lease()
    text = replicas_comment()
    least, most = lease.lease_seconds, lease.lease_seconds + 2 * lease.retry_seconds
    assert f"the {lease.lease_seconds:g} s lease plus up to two of those polls" in text, text
    assert f"next poll (every {lease.retry_seconds:g} s)" in text, text
    assert f"{least:g}–{most:g} s after its last renewal" in text, text
    assert not re.search(r"within the lease", text), "a lost leader is not replaced within the lease"
