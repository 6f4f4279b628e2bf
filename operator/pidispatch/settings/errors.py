"""The one error every setting reader raises: the variable, what it was given, and what it accepts."""

from __future__ import annotations


class ConfigError(Exception):
    """A setting that cannot be used as given. The CLI prints it as one line and exits 2.

    The message names the variable and the accepted form, so the person who wrote the manifest can fix
    it without reading the code. A reader that must not echo its value (a secret) passes something else.
    """

    def __init__(self, variable: str, value: str, accepted: str) -> None:
        super().__init__(f"{variable}={value!r} is not valid: expected {accepted}")
        self.variable = variable
        self.accepted = accepted
