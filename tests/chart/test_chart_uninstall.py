"""The chart's retention values and its pre-delete hook, rendered offline (issue 14 item 6).

Beside ``test_chart.py`` to keep that file from growing (the helpers are in ``testkit/chart.py``, the ``helm``
fixture in ``conftest.py``); ``e2e/test_chart_uninstall.py`` runs the hook on a real control plane.
"""

from __future__ import annotations

from typing import Any

import pytest

from pidispatch.contract import JOB_LABEL
from pidispatch.settings import OperatorSettings
from testkit.chart import ALL_ON, FULLNAME, NAMESPACE, RELEASE, env_values, one, operator_container, render, template

HOOK = f"{FULLNAME}-stop-jobs"
POLICY = "before-hook-creation,hook-succeeded"


def hook_objects(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {d["kind"]: d for d in docs if (d["metadata"].get("annotations") or {}).get("helm.sh/hook") == "pre-delete"}


@pytest.mark.parametrize("values", [{}, ALL_ON], ids=["defaults", "sessions and every option on"])
def test_the_pre_delete_hook_stops_the_job_pods_with_its_own_short_lived_access(helm: Any, values: dict) -> None:
    docs = render(helm, values)
    hooks = hook_objects(docs)
    assert sorted(hooks) == ["Job", "Role", "RoleBinding", "ServiceAccount"]
    for obj in hooks.values():
        annotations = obj["metadata"]["annotations"]
        assert obj["metadata"]["name"] == HOOK and annotations["helm.sh/hook-delete-policy"] == POLICY
    weights = {kind: int(obj["metadata"]["annotations"]["helm.sh/hook-weight"]) for kind, obj in hooks.items()}
    assert max(weights[k] for k in ("ServiceAccount", "Role", "RoleBinding")) < weights["Job"], "access first"

    job = hooks["Job"]
    pod = job["spec"]["template"]
    [container] = pod["spec"]["containers"]
    assert container["command"] == ["pidispatch", "stop-jobs", "--deployment", FULLNAME, "--release", RELEASE,
                                    "--staging-claim", f"{FULLNAME}-staging"], "this release's job Pods only"
    assert container["image"] == operator_container(docs)["image"]
    assert pod["spec"]["serviceAccountName"] == HOOK and pod["spec"]["restartPolicy"] == "Never"
    assert env_values(container) == {"PI_DISPATCH_NAMESPACE": NAMESPACE}
    assert job["spec"]["activeDeadlineSeconds"] > 0 and job["spec"]["backoffLimit"] <= 1
    psc, sc = pod["spec"]["securityContext"], container["securityContext"]
    assert psc["runAsNonRoot"] is True and psc["seccompProfile"] == {"type": "RuntimeDefault"}
    assert sc["allowPrivilegeEscalation"] is False and sc["readOnlyRootFilesystem"] is True
    assert sc["capabilities"] == {"drop": ["ALL"]}
    labels = pod["metadata"]["labels"]
    selector = one(docs, "Deployment", FULLNAME)["spec"]["selector"]["matchLabels"]
    assert not selector.items() <= labels.items(), "the hook's Pod is not an operator Pod"
    assert JOB_LABEL not in labels, "nor a job Pod (it would delete itself)"
    assert [v["name"] for v in pod["spec"]["volumes"]] == ["tmp"], "it mounts no claim of its own"


def test_the_hooks_role_touches_only_this_releases_deployment_and_pods(helm: Any) -> None:
    hooks = hook_objects(render(helm, ALL_ON))
    rules = hooks["Role"]["rules"]
    assert {(r["apiGroups"][0], r["resources"][0], tuple(r["verbs"]), tuple(r.get("resourceNames", ())))
            for r in rules} == {("apps", "deployments", ("get",), (FULLNAME,)),
                                ("apps", "deployments/scale", ("patch",), (FULLNAME,)),
                                ("", "pods", ("list", "delete"), ())}
    binding = hooks["RoleBinding"]
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": HOOK}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": HOOK, "namespace": NAMESPACE}]


def test_retention_values_reach_the_operator_settings(helm: Any) -> None:
    env = env_values(operator_container(render(helm, {"job.podRetentionSeconds": 0,
                                                      "job.ttlSecondsAfterFinished": 86400})))
    settings = OperatorSettings.from_env(env)
    assert (settings.job_pod_retention_seconds, settings.job_ttl_seconds_after_finished) == (0, 86400)
    defaults = env_values(operator_container(render(helm)))
    assert defaults["PI_DISPATCH_JOB_POD_RETENTION_SECONDS"] == "600"
    assert "PI_DISPATCH_JOB_TTL_SECONDS_AFTER_FINISHED" not in defaults, "null: pijobs are kept"


@pytest.mark.parametrize(("values", "field"), [
    ({"job.podRetentionSeconds": -1}, "podRetentionSeconds"),
    ({"job.podRetentionSeconds": "600"}, "podRetentionSeconds"),
    ({"job.ttlSecondsAfterFinished": -5}, "ttlSecondsAfterFinished"),
    ({"job.ttlSecondsAfterFinished": 1.5}, "ttlSecondsAfterFinished"),
], ids=["negative retention", "retention as a string", "negative ttl", "fractional ttl"])
def test_schema_rejects_bad_retention_values(helm: Any, values: dict[str, Any], field: str) -> None:
    result = template(helm, values)
    assert result.returncode != 0
    assert "schema" in result.stderr and field in result.stderr, result.stderr
