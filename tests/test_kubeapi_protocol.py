"""``KubeApi`` is what the job flow asks of the API server; the real ``Api`` and the tests' ``MemoryApi`` are both one.

If either drifts from the protocol (a method missing, a parameter the job flow passes not accepted), the
unit tests would be exercising a fake the operator never meets: this fails first.
"""

from __future__ import annotations

import inspect

import pytest

from pidispatch.kubeapi import Api, KubeApi
from testkit.memoryapi import MemoryApi

METHODS = sorted(name for name, member in vars(KubeApi).items()
                 if callable(member) and not name.startswith("_"))


def test_the_protocol_names_the_calls_the_job_flow_makes() -> None:
    assert METHODS == ["create", "delete", "get", "get_or_none", "list", "pages", "patch"]


@pytest.mark.parametrize("implementation", [Api, MemoryApi], ids=["the real Api", "the tests' MemoryApi"])
def test_each_implementation_is_a_kubeapi(implementation: type) -> None:
    instance = MemoryApi() if implementation is MemoryApi else Api("https://127.0.0.1:1")
    assert isinstance(instance, KubeApi)


@pytest.mark.parametrize("implementation", [Api, MemoryApi], ids=["the real Api", "the tests' MemoryApi"])
@pytest.mark.parametrize("method", METHODS)
def test_each_method_accepts_every_call_the_protocol_allows(implementation: type, method: str) -> None:
    """Every parameter of the protocol's method binds on the implementation's (by position and by name)."""
    declared = inspect.signature(getattr(KubeApi, method))
    actual = inspect.signature(getattr(implementation, method))
    args, kwargs = [], {}
    for p in list(declared.parameters.values())[1:]:
        if p.kind is p.POSITIONAL_OR_KEYWORD:
            args.append(object())
        elif p.kind is p.KEYWORD_ONLY:
            kwargs[p.name] = object()
        elif p.kind is p.VAR_KEYWORD:
            kwargs["labelSelector"] = object()  # what the job flow passes through ``**params``
    actual.bind(None, *args, **kwargs)
