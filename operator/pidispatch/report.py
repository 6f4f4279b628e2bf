"""The operator's reading of the runner's report: the one model lives with the container contract.

``pidispatch.contract.report`` defines the report once, for the runner that writes it and the operator that
reads it; these names stay importable here for the job flow (``jobflow/complete.py``, ``jobflow/sessionkey.py``).
"""

from __future__ import annotations

from pidispatch.contract.report import CHECKOUT_FAILURES, OUTCOMES, Rethread, RunnerReport, Workspace

__all__ = ["CHECKOUT_FAILURES", "OUTCOMES", "Rethread", "RunnerReport", "Workspace", "parse_report"]


def parse_report(message: str | None) -> RunnerReport | None:
    """Read a termination message (:meth:`RunnerReport.from_message`); ``None`` when it is no report."""
    return RunnerReport.from_message(message)
