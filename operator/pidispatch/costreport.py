"""``pidispatch report`` (pure): what each key's jobs cost, by how they started, from the SessionKeys' status.

The counters are the operator's (``jobflow/cost.py`` writes ``status.usage`` when a job ends); this module
only reads them: one row per key and a row for all keys, as a table for people or JSON for machines. A job
without a session has no key and is in the fleet's metrics only (``pidispatch_jobs_ended_total{session="none"}``).
"""

from __future__ import annotations

from typing import Any

from pidispatch.contract import TOKEN_FIELDS
from pidispatch.jobflow.cost import STARTS

SUMMED = ("jobs", *TOKEN_FIELDS)


def _number(value: Any) -> float:
    return value if isinstance(value, int | float) and not isinstance(value, bool) else 0


def _part(raw: Any) -> dict[str, Any]:
    """One start's counters as read (numbers only), with ``perJob``: the mean tokens of its jobs (None: none)."""
    part: dict[str, Any] = {name: _number(raw.get(name)) for name in SUMMED if isinstance(raw, dict) and name in raw}
    part["jobs"] = int(part.get("jobs", 0))
    part["perJob"] = round(part.get("total", 0) / part["jobs"], 1) if part["jobs"] else None
    return part


def _rate(parts: dict[str, dict[str, Any]]) -> float | None:
    jobs = sum(parts[s]["jobs"] for s in STARTS)
    return round(parts["resumed"]["jobs"] / jobs, 3) if jobs else None


def key_row(sessionkey: dict[str, Any]) -> dict[str, Any]:
    """A SessionKey (as the API returned it) as one row of the report."""
    spec = sessionkey.get("spec") or {}
    usage = (sessionkey.get("status") or {}).get("usage") or {}
    parts = {start: _part(usage.get(start) or {}) for start in STARTS}
    return {"key": (sessionkey.get("metadata") or {}).get("name"), "repository": spec.get("repository"),
            "branch": spec.get("branch"), **parts, "resumeRate": _rate(parts)}


def report(sessionkeys: list[dict[str, Any]]) -> dict[str, Any]:
    """The report's JSON: ``keys`` (a row per key, by repository and branch) and ``total`` over all of them."""
    rows = sorted((key_row(sk) for sk in sessionkeys), key=lambda r: (r["repository"] or "", r["branch"] or ""))
    total: dict[str, dict[str, Any]] = {}
    for start in STARTS:
        summed = {name: sum(_number(r[start].get(name)) for r in rows) for name in SUMMED
                  if any(name in r[start] for r in rows)}
        total[start] = _part({**summed, "jobs": summed.get("jobs", 0)})
    return {"keys": rows, "total": {**total, "resumeRate": _rate(total)}}


def _tokens(value: float | None) -> str:
    if value is None:
        return "-"
    if value >= 10_000_000:
        return f"{value / 1_000_000:.0f}M"
    if value >= 10_000:
        return f"{value / 1000:.0f}k"
    return f"{value:.0f}"


def _cost(row: dict[str, Any]) -> str:
    spent = sum(_number(row[s].get("cost")) for s in STARTS)
    unpriced = sum(_number(row[s].get("unpriced")) for s in STARTS)
    if not any("cost" in row[s] for s in STARTS):
        return "-"
    return f"${spent:.4f}" + ("+" if unpriced else "")  # +: some replies had no price


def table(data: dict[str, Any]) -> str:
    """The report as a table: jobs by start, mean tokens per job by start, resume rate and cost per key."""
    header = ("KEY", "REPOSITORY", "BRANCH", "JOBS R/T/C", "RESUMED", "TOKENS/JOB RESUMED", "RETHREADED", "COLD",
              "COST")
    lines: list[tuple[str, ...]] = [header]
    for row in [*data["keys"], {"key": "all keys", "repository": "", "branch": "", **data["total"]}]:
        rate = row["resumeRate"]
        lines.append((row["key"] or "", row["repository"] or "", row["branch"] or "",
                      "/".join(str(row[s]["jobs"]) for s in STARTS), "-" if rate is None else f"{rate:.0%}",
                      *(_tokens(row[s]["perJob"]) for s in STARTS), _cost(row)))
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    text = ["  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip() for line in lines]
    if not data["keys"]:
        text.append("(no SessionKeys: no job with a session has ended in this namespace)")
    return "\n".join(text) + "\n"
