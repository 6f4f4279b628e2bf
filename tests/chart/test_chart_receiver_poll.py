"""``receiver.poll.enabled``: the receiver reads the forge instead of serving a webhook
(docs/triggers.md#polling-instead-of-a-webhook). Rendered offline with the pinned helm; the environment is read back
by the receiver's own settings, so the chart and ``ReceiverSettings`` cannot disagree."""

from __future__ import annotations

from typing import Any

import pytest

from pidispatch.receiver.settings import ReceiverSettings
from testkit.chart import NAMESPACE, RECEIVER, env_values, kinds, one, render, template

POLL: dict[str, Any] = {"receiver.enabled": True, "receiver.poll.enabled": True, "receiver.poll.intervalSeconds": 120,
                        "github.authSource": "pat", "github.token.secretName": "gh-token"}
CURSOR = f"{RECEIVER}-poll-cursor"


def receiver(docs: list[dict[str, Any]]) -> dict[str, Any]:
    return one(docs, "Deployment", RECEIVER)


def test_poll_mode_needs_no_webhook_secret_and_renders_no_webhook_surface(helm: Any) -> None:
    docs = render(helm, POLL)
    deployment = receiver(docs)
    assert deployment["spec"]["replicas"] == 1
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert [p["name"] for p in container["ports"]] == ["health"]
    assert [m["name"] for m in container["volumeMounts"]] == ["github-token"]
    assert [v["name"] for v in deployment["spec"]["template"]["spec"]["volumes"]] == ["github-token"]
    assert not [s for s in kinds(docs, "Service") if s["metadata"]["name"] == RECEIVER]
    assert not kinds(docs, "PodDisruptionBudget") or all(
        p["metadata"]["name"] != RECEIVER for p in kinds(docs, "PodDisruptionBudget"))
    # helm test's unsigned delivery has no webhook Service to go to
    tested = render(helm, {**POLL, "tests.enabled": True})
    assert not [p for p in kinds(tested, "Pod") if "webhook" in p["metadata"]["name"]]


def test_the_receivers_own_settings_read_the_rendered_environment(helm: Any) -> None:
    container = receiver(render(helm, POLL))["spec"]["template"]["spec"]["containers"][0]
    env = env_values(container, NAMESPACE)
    settings = ReceiverSettings.from_env(env)
    assert settings.polling and settings.poll_interval == 120 and settings.poll_cursor == CURSOR
    assert settings.github is not None and settings.github.token_file == "/etc/pi-dispatch/github-token/token"
    assert "GITHUB_WEBHOOK_SECRET_FILE" not in env


def test_the_role_adds_only_the_cursors_configmap(helm: Any) -> None:
    rules = one(render(helm, POLL), "Role", RECEIVER)["rules"]
    configmaps = [r for r in rules if "configmaps" in r["resources"]]
    assert configmaps == [{"apiGroups": [""], "resources": ["configmaps"], "resourceNames": [CURSOR],
                           "verbs": ["get", "patch"]},
                          {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["create"]}]
    webhook = one(render(helm, {"receiver.enabled": True, "receiver.webhookSecret.existingSecret": "w"}), "Role",
                  RECEIVER)["rules"]
    assert not [r for r in webhook if "configmaps" in r["resources"]]


def test_an_app_credential_is_mounted_as_the_operator_mounts_it(helm: Any) -> None:
    values = {**POLL, "github.authSource": "app", "github.token.secretName": "", "github.app.id": 1,
              "github.app.installationId": 2, "github.app.privateKeySecret.name": "app-key"}
    container = receiver(render(helm, values))["spec"]["template"]["spec"]["containers"][0]
    settings = ReceiverSettings.from_env(env_values(container, NAMESPACE))
    assert settings.github is not None and settings.github.app_id == 1
    assert [m["mountPath"] for m in container["volumeMounts"]] == ["/etc/pi-dispatch/github-app"]


@pytest.mark.parametrize("extra", [{"receiver.ingress.enabled": True, "receiver.ingress.host": "pi.example.com"}])
def test_a_webhook_route_beside_poll_mode_is_refused(helm: Any, extra: dict[str, Any]) -> None:
    result = template(helm, {**POLL, **extra})
    assert result.returncode != 0 and "serves no webhook" in result.stderr
