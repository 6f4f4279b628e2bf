"""The release rehearsed end to end (``e2e/framework/rehearsal.py``, the code ``make release-rehearsal`` runs): both
images pushed by digest to a registry on this machine, each with an SBOM, a signature and a signed SPDX attestation
(cosign, a key pair of the run), the chart pushed as an OCI artifact and signed, every signature verified, then the
README's quickstart installed from that registry on a real node that was given no image, and one job run to
``Succeeded`` from the pushed job image.

Proven here, beyond the rehearsal's own checks (any failed verification stops it): what was verified names the
digests that were pushed and the SBOMs that were made; a key other than the release's verifies nothing; an image
of the same repository that was never signed does not verify; what ran on the node was pulled from the registry
by those digests (containerd's image IDs, the registry's log) and nothing of ``make images`` is on the node.

About 110 s (85 s of it the rehearsal) with the images of ``make images`` built. Run with ``pytest -m realnode``
(root, the Debian packages of ``make node``, the tools of ``make controlplane``); ``make test`` runs it. Where a real
node cannot run, the tests are skipped with the reason, unless ``PIDISPATCH_REQUIRE_REAL_NODE=1`` (CI) makes that a
failure.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from e2e.framework.clusterkit import REPO_ROOT
from e2e.framework.realnode import images_env, unavailable
from e2e.framework.rehearsal import PULL_SECRET, REPO, Rehearsal, rehearse
from e2e.framework.releasetools import Published, ReleaseError
from testkit.scripted_model import text_of

pytestmark = [pytest.mark.e2e, pytest.mark.realnode]

PI_PACKAGE = "@mariozechner/pi-coding-agent"


@pytest.fixture(scope="module")
def rehearsal(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rehearsal]:
    why = unavailable()
    if why:
        if os.environ.get("PIDISPATCH_REQUIRE_REAL_NODE") == "1":
            pytest.fail(f"PIDISPATCH_REQUIRE_REAL_NODE=1 but no real node can run here: {why}")
        pytest.skip(f"no real node on this machine: {why}")
    t0 = time.monotonic()
    work = tmp_path_factory.mktemp("rehearsal")
    with rehearse(work) as r:
        print(f"rehearsal up in {time.monotonic() - t0:.0f}s: " +
              ", ".join(f"{step} {s:.0f}s" for step, s in r.tools.timings.items()))
        yield r
    shutil.rmtree(work / "registry" / "storage", ignore_errors=True)  # the pushed images: about 1 GB


def packages(sbom: dict[str, Any]) -> dict[str, set[str]]:
    """``{name: {versions}}`` of an SPDX document's packages."""
    out: dict[str, set[str]] = {}
    for p in sbom["packages"]:
        out.setdefault(p["name"], set()).add(p.get("versionInfo", ""))
    return out


def test_each_image_is_pushed_by_digest_and_its_signature_and_sbom_attestation_name_that_digest(
        rehearsal: Rehearsal) -> None:
    r = rehearsal
    assert r.version == yaml.safe_load((REPO_ROOT / "charts" / "pi-dispatch" / "Chart.yaml").read_text())["version"]
    for target in ("operator", "job"):
        image = r.images[target]
        assert image.repository == f"{r.registry.host}/pi-dispatch/{target}"
        # what the registry serves under the release's tag is the digest recorded
        assert r.registry.digest(f"pi-dispatch/{target}:{r.version}") == image.digest
        assert r.signatures[target], target
        for payload in r.signatures[target]:
            assert payload["critical"]["image"]["docker-manifest-digest"] == image.digest
            assert payload["critical"]["type"] == "https://sigstore.dev/cosign/sign/v1"
        [statement] = r.attestations[target]
        assert statement["predicateType"] == "https://spdx.dev/Document"
        assert statement["subject"][0]["digest"] == {"sha256": image.digest.removeprefix("sha256:")}
        # the attested SBOM is the one syft made of this image, not any SPDX document
        made = r.sboms[target]
        assert statement["predicate"]["documentNamespace"] == made["documentNamespace"]
        assert len(statement["predicate"]["packages"]) == len(made["packages"])
    pi_version = json.loads((REPO_ROOT / "e2e" / "pi" / "package.json").read_text())["dependencies"][PI_PACKAGE]
    assert pi_version in packages(r.sboms["job"]).get(PI_PACKAGE, set()), "the job image's SBOM names its pi"
    assert r.version in packages(r.sboms["operator"]).get("pidispatch", set()), "and the operator's its own package"


def test_the_chart_is_the_release_s_version_as_an_oci_artifact_and_its_signature_verifies(
        rehearsal: Rehearsal) -> None:
    r = rehearsal
    assert r.chart is not None
    assert r.chart.repository == f"{r.registry.host}/pi-dispatch/charts/pi-dispatch"
    assert {p["critical"]["image"]["docker-manifest-digest"] for p in r.signatures["chart"]} == {r.chart.digest}
    shown = r.tools.run("helm show chart", ["helm", "show", "chart", f"oci://{r.chart.repository}", "--version",
                                            r.version, "--ca-file", str(r.registry.ca)]).stdout
    chart = yaml.safe_load(shown)
    assert (chart["version"], chart["appVersion"]) == (r.version, r.version)


def test_a_key_other_than_the_release_s_verifies_no_image_no_attestation_and_not_the_chart(
        rehearsal: Rehearsal) -> None:
    r = rehearsal
    assert r.chart is not None
    other = r.tools.generate_key_pair("someone-else")
    for image in r.images.values():
        # cosign v3 says "no matching attestations" for both: its signatures are bundles too
        for check in (r.tools.verify, r.tools.verify_attestation):
            with pytest.raises(ReleaseError) as refused:
                check(image, other.public)
            assert "accepted signatures do not match threshold, Found: 0" in str(refused.value), refused.value
    with pytest.raises(ReleaseError) as refused:
        r.tools.verify(r.chart, other.public)
    assert "accepted signatures do not match threshold, Found: 0" in str(refused.value), refused.value
    # and the release's own key still verifies all of it
    assert r.key is not None
    for image in r.images.values():
        r.tools.verify(image, r.key.public)


def test_an_image_of_the_release_s_repository_that_was_never_signed_does_not_verify(rehearsal: Rehearsal) -> None:
    r = rehearsal
    assert r.key is not None
    env = images_env()
    containers = {k: v for k, v in env.items() if k.startswith("CONTAINERS_")}
    digest = r.registry.push_layered(env["JOB_IMAGE"], "pi-dispatch/job:unsigned",
                                     {"/etc/pidispatch-unsigned": b"not the release\n"}, containers)
    unsigned = Published(r.images["job"].repository, digest)
    assert unsigned.digest != r.images["job"].digest
    with pytest.raises(ReleaseError) as refused:
        r.tools.verify(unsigned, r.key.public)
    assert "no signatures found" in str(refused.value), refused.value
    with pytest.raises(ReleaseError) as refused:
        r.tools.verify_attestation(unsigned, r.key.public)
    assert "no matching attestations" in str(refused.value), refused.value


def test_the_quickstart_installed_from_the_registry_ran_its_job_from_the_pushed_digests(rehearsal: Rehearsal) -> None:
    r = rehearsal
    assert r.release is not None and r.job is not None and r.cluster is not None
    operator, job_image = r.images["operator"], r.images["job"]
    assert r.job["status"]["phase"] == "Succeeded", r.job["status"]
    # the release is the registry's chart at the release's version
    [listed] = json.loads(r.release.helm("list", "--output", "json").stdout)
    assert listed["chart"] == f"pi-dispatch-{r.version}" and listed["app_version"] == r.version, listed
    kube = r.release.kube

    def pods(component: str) -> list[dict[str, Any]]:
        return kube.list(f"/api/v1/namespaces/{r.release.ns}/pods",  # type: ignore[union-attr]
                         labelSelector=f"app.kubernetes.io/component={component}")

    runs = {"operator": pods("operator"), "receiver": pods("receiver"),
            "job": [kube.get(f"/api/v1/namespaces/{r.release.ns}/pods/{r.job['status']['podName']}")]}
    assert len(runs["operator"]) == 1 and len(runs["receiver"]) >= 1, runs
    for component, found in runs.items():
        want = job_image if component == "job" else operator
        for pod in found:
            assert [c["image"] for c in pod["spec"]["containers"]] == [want.ref], (component, pod["spec"])
            assert pod["spec"]["imagePullSecrets"] == [{"name": PULL_SECRET}], component
            # the image the container ran is the one pushed, by digest
            assert [s["imageID"] for s in pod["status"]["containerStatuses"]] == [want.ref], component
    # containerd fetched both manifests by digest from the registry, as the pull Secret's user
    served = r.registry.served("containerd/")
    for image in (operator, job_image):
        path = image.repository.split("/", 1)[1]
        assert f"200 {r.registry.username} GET /v2/{path}/manifests/{image.digest}" in served, served
    # the node was given nothing but the pause image: no image of `make images` is in its containerd, only what
    # it pulled from the registry (names and image IDs)
    names = r.node.ctr("images", "ls", "--quiet").stdout.split()
    given = [n for n in names if not n.startswith((f"{r.registry.host}/", "sha256:"))]
    assert len(given) == 1 and given[0].startswith("localhost/pidispatch/pause:"), names
    assert operator.ref in names and job_image.ref in names, names
    # pi ran in the pulled job image on the checked-out repository: its bash read the README of acme/widgets
    said = "\n".join(text_of(m.get("content")) for body in r.model_requests for m in body.get("messages", []))
    assert "# widgets" in said, f"pi's bash did not read {REPO}'s README"
    assert all(body.get("model") == "gpt-4.1" for body in r.model_requests), "the quickstart Trigger's model"
