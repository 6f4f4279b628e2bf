"""The images the chart names: by tag (the release's appVersion) by default, by digest with ``image.digest`` and
``job.imageDigest``, so an install can pull exactly what a release pushed and signed (docs/releasing.md).

Rendered offline with the pinned helm; the job image is read back by the operator's own settings parser.
"""

from __future__ import annotations

from typing import Any

import pytest

from pidispatch.settings import OperatorSettings
from testkit.chart import (
    ALL_ON,
    APP_VERSION,
    FULLNAME,
    RECEIVER_ON,
    env_values,
    one,
    render,
    template,
)

OPERATOR_DIGEST = "sha256:" + "a1" * 32
JOB_DIGEST = "sha256:" + "b2" * 32
# every workload the chart can render with the operator's image: the operator, the receiver, the helm test Pods,
# the uninstall hook
EVERYTHING = {**ALL_ON, **RECEIVER_ON}


def images(docs: list[dict[str, Any]]) -> dict[str, str]:
    """``{"<Kind>/<name>/<container>": image}`` of every container the chart renders."""
    out = {}
    for doc in docs:
        spec = doc.get("spec") or {}
        pod = (spec.get("template") or {}).get("spec") or spec  # a Deployment's or Job's template, or a Pod
        for container in pod.get("initContainers", []) + pod.get("containers", []):
            out[f"{doc['kind']}/{doc['metadata']['name']}/{container['name']}"] = container["image"]
    return out


def job_image(docs: list[dict[str, Any]]) -> str:
    """What the operator reads from the chart's PI_DISPATCH_JOB_IMAGE."""
    [container] = one(docs, "Deployment", FULLNAME)["spec"]["template"]["spec"]["containers"]
    return OperatorSettings.from_env(env_values(container)).job_image


def test_by_default_every_image_is_the_release_s_own_by_its_app_version_tag(helm: Any) -> None:
    docs = render(helm, EVERYTHING)
    found = images(docs)
    assert len(found) >= 4, found  # operator, receiver, helm test Pods, uninstall hook
    assert set(found.values()) == {f"ghcr.io/pi-dispatch/operator:{APP_VERSION}"}, found
    assert job_image(docs) == f"ghcr.io/pi-dispatch/job:{APP_VERSION}"


def test_image_digest_pins_every_workload_of_the_operator_s_image_and_drops_the_tag(helm: Any) -> None:
    docs = render(helm, {**EVERYTHING, "image.repository": "127.0.0.1:5000/pi-dispatch/operator",
                         "image.tag": "0.2.0", "image.digest": OPERATOR_DIGEST})
    found = images(docs)
    assert set(found.values()) == {f"127.0.0.1:5000/pi-dispatch/operator@{OPERATOR_DIGEST}"}, found
    assert job_image(docs) == f"ghcr.io/pi-dispatch/job:{APP_VERSION}", "the job image is its own value"


@pytest.mark.parametrize(("image", "expected"), [
    ("", "ghcr.io/pi-dispatch/job"),
    ("127.0.0.1:5000/pi-dispatch/job:0.2.0", "127.0.0.1:5000/pi-dispatch/job"),  # the tag goes, the port stays
    ("127.0.0.1:5000/pi-dispatch/job", "127.0.0.1:5000/pi-dispatch/job"),
    ("registry.example/team/pi-job:latest", "registry.example/team/pi-job"),
], ids=["the release's job image", "a tag and a registry port", "a registry port, no tag", "a tag"])
def test_job_image_digest_names_the_job_image_s_repository_by_digest(helm: Any, image: str, expected: str) -> None:
    values: dict[str, Any] = {"job.imageDigest": JOB_DIGEST}
    if image:
        values["job.image"] = image
    docs = render(helm, values)
    assert job_image(docs) == f"{expected}@{JOB_DIGEST}"
    assert set(images(docs).values()) == {f"ghcr.io/pi-dispatch/operator:{APP_VERSION}"}, "the operator's unchanged"


def test_a_job_image_that_already_names_a_digest_and_a_job_image_digest_fail_naming_both(helm: Any) -> None:
    result = template(helm, {"job.image": f"r.example/job@{JOB_DIGEST}", "job.imageDigest": JOB_DIGEST})
    assert result.returncode != 0
    assert "job.imageDigest is set but job.image" in result.stderr and "already names a digest" in result.stderr, \
        result.stderr


@pytest.mark.parametrize("key", ["image.digest", "job.imageDigest"])
@pytest.mark.parametrize("digest", ["latest", "sha256:abc", "sha512:" + "c3" * 64, "SHA256:" + "a1" * 32,
                                    OPERATOR_DIGEST + "\n"])
def test_the_schema_refuses_what_is_not_a_sha256_digest(helm: Any, key: str, digest: str) -> None:
    result = template(helm, {key: digest})
    assert result.returncode != 0, f"{key}={digest!r} rendered"
    assert key.split(".")[-1] in result.stderr and "values don't meet the specifications" in result.stderr, \
        result.stderr
