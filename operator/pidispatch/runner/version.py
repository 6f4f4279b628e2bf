"""Is the pi this image runs the version the Trigger declared? (docs/store-contract.md#operator-side)

The operator stamps the declared version (`spec.run.piVersion`, env `PI_VERSION`) on the promoted
transcript, and the `pi-version-changed` gate trusts that stamp. A job that ran another pi would make
the stamp a lie, so a mismatch, or a pi whose version cannot be read, is a configuration error (exit 2)
before anything is spent.

When `PI_VERSION` is unset (or empty) there is nothing to check against: the runner runs and reports
what pi says. The store stays safe without the check, because the operator stamps only the version it
declared, and an undeclared (unknown) version never resumes (`pi-version-changed`).
"""

from __future__ import annotations

import re

# What `pi --version` prints (0.73.1), within the characters the operator accepts in a report.
VERSION_SHAPE = re.compile(r"[0-9]+\.[0-9]+\.[0-9]+[0-9A-Za-z.+_-]{0,48}")


class VersionError(Exception):
    """pi's version could not be read, or is not the declared one: the runner's one line before exit 2."""


def parse_version_output(output: str) -> str | None:
    """The version from `pi --version` output (stdout and stderr together), else None.

    pi prints it to stderr when stdin is not a TTY (docs/pi-behaviour.md#version), hence both streams and the
    last non-empty line.
    """
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    if not lines:
        return None
    candidate = lines[-1].removeprefix("v")
    return candidate if VERSION_SHAPE.fullmatch(candidate) else None


def version_problem(declared: str | None, reported: str | None, pi_bin: str) -> str | None:
    """The one-line configuration error, or None when the versions agree (or none was declared)."""
    if reported is None:
        return (f"cannot read the version of pi (PI_BIN={pi_bin}): `{pi_bin} --version` did not print one; "
                "install pi in the job image or point PI_BIN at it")
    if declared is not None and declared.removeprefix("v") != reported:
        return (f"pi {reported} (PI_BIN={pi_bin}) is not the version the Trigger declares "
                f"(PI_VERSION={declared}): build the job image with pi {declared}, or declare "
                f"spec.run.piVersion: {reported!r} on the Trigger")
    return None
