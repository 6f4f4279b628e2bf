"""The GitHub Actions workflows (.github/workflows): actionlint finds nothing, and the release publishes what
the chart names.

actionlint is the pinned one (e2e/controlplane/versions.env, built by ``make controlplane`` into the control
plane's bin dir), run with its shellcheck and pyflakes integrations off: what it reports must not depend on
what else a machine has on its PATH. The release's own check, ``.github/scripts/release-meta.sh``, runs here
on the repository and on edited copies of the files it reads.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
WORKFLOWS = ROOT / ".github" / "workflows"
RELEASE_META = ROOT / ".github" / "scripts" / "release-meta.sh"
CHART = ROOT / "charts" / "pi-dispatch"
BUILD = ROOT / "e2e" / "controlplane" / "build.sh"
# Deterministic: actionlint would otherwise run shellcheck and pyflakes when it finds them on PATH.
ACTIONLINT_FLAGS = ("-shellcheck=", "-pyflakes=", "-no-color")
SHA_PIN = re.compile(r"^[\w.-]+/[\w.-]+(/[\w./-]+)?@[0-9a-f]{40}$")


def actionlint() -> Path:
    """The pinned actionlint; a missing one fails the test with the command that builds it (never a skip)."""
    if os.environ.get("PIDISPATCH_BIN_DIR"):
        bin_dir = Path(os.environ["PIDISPATCH_BIN_DIR"])
    else:
        bin_dir = Path(subprocess.run([str(BUILD), "--print-bin-dir"], check=True, capture_output=True,
                                      text=True).stdout.strip())
    binary = bin_dir / "actionlint"
    if not os.access(binary, os.X_OK):
        pytest.fail(f"{binary} is missing: build it with `make controlplane` (e2e/controlplane/build.sh builds "
                    "only what is missing)")
    return binary


def lint(cwd: Path, *files: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(actionlint()), *ACTIONLINT_FLAGS, *map(str, files)], cwd=cwd, capture_output=True,
                          text=True, timeout=60)


def load(path: Path) -> dict[Any, Any]:
    doc = yaml.safe_load(path.read_text())
    # YAML 1.1 reads the key `on` as the boolean true
    doc["on"] = doc.pop(True, doc.get("on"))
    return doc


# ---- actionlint ---------------------------------------------------------------------------------------

def test_actionlint_finds_nothing_in_the_workflows() -> None:
    files = sorted(WORKFLOWS.glob("*.y*ml"))
    assert {f.name for f in files} >= {"release.yml", "ci.yml"}
    result = lint(ROOT, *files)
    findings = result.stdout + result.stderr
    assert result.returncode == 0 and not findings, f"actionlint (exit {result.returncode}):\n{findings}"


BROKEN_JOB = """\
name: broken
on:
  push:
    tags: ["v*"]
permissions:
  contents: read
jobs:
  build:
    runs-on: ubuntu-24.04
    steps:
{step}
"""

# (a broken step, what actionlint says about it)
BROKEN = {
    "an expression naming an undefined job output": (
        "      - run: echo ${{ needs.meta.outputs.version }}", 'property "meta" is not defined'),
    "a step with both uses and run": (
        "      - uses: actions/checkout@3d3c42e5aac5ba805825da76410c181273ba90b1\n        run: make",
        'unexpected key "uses"'),
    "an action without a ref": ("      - uses: actions/checkout", "ref is missing"),
    "an unknown permission scope": (
        "      - run: true\n    permissions:\n      packagez: write", 'unknown permission scope "packagez"'),
    "a context that does not exist": ("      - run: echo ${{ gitbub.sha }}", 'undefined variable "gitbub"'),
}


@pytest.mark.parametrize("case", list(BROKEN), ids=list(BROKEN))
def test_actionlint_fails_a_broken_workflow(tmp_path: Path, case: str) -> None:
    step, says = BROKEN[case]
    workflows = tmp_path / ".github" / "workflows"
    workflows.mkdir(parents=True)
    broken = workflows / "broken.yml"
    broken.write_text(BROKEN_JOB.format(step=step))
    result = lint(tmp_path, broken)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "broken.yml" in result.stdout and says in result.stdout, result.stdout


# ---- the release's shape --------------------------------------------------------------------------------

# The jobs that sign (cosign keyless) are the only ones given the workflow's OIDC token.
SIGNING_JOBS = {"images", "chart"}


def test_release_runs_on_a_version_tag_with_least_privilege() -> None:
    release = load(WORKFLOWS / "release.yml")
    assert release["on"] == {"push": {"tags": ["v*"]}}
    assert release["permissions"] == {"contents": "read"}
    assert SIGNING_JOBS <= set(release["jobs"])
    for name, job in release["jobs"].items():
        granted = job.get("permissions")
        assert granted is not None, f"job {name} inherits permissions instead of naming them"
        allowed = {("contents", "read"), ("packages", "write")}
        if name in SIGNING_JOBS:
            allowed.add(("id-token", "write"))
        assert set(granted.items()) <= allowed, (name, granted)
    assert release["jobs"]["meta"]["permissions"] == {"contents": "read"}, "no token for the job that reads the tag"


def test_every_action_is_pinned_by_commit() -> None:
    for path in sorted(WORKFLOWS.glob("*.y*ml")):
        for name, job in load(path)["jobs"].items():
            for step in job.get("steps", []):
                if "uses" in step:
                    assert SHA_PIN.match(step["uses"]), f"{path.name} job {name}: {step['uses']} is not pinned " \
                                                        "by a 40-hex commit"
        # and each pin says which release it is, for the reader and for Dependabot
        for line in path.read_text().splitlines():
            if "uses:" in line:
                assert re.search(r"@[0-9a-f]{40}\s+#\s*v\d", line), f"{path.name}: {line.strip()} has no # vX comment"


def test_release_builds_both_targets_multi_arch_and_pushes_the_chart_after_them() -> None:
    jobs = load(WORKFLOWS / "release.yml")["jobs"]
    images = jobs["images"]
    assert [m["target"] for m in images["strategy"]["matrix"]["include"]] == ["operator", "job"]
    build = next(s for s in images["steps"] if s.get("uses", "").startswith("docker/build-push-action@"))
    assert build["with"]["target"] == "${{ matrix.target }}"
    assert build["with"]["platforms"] == "linux/amd64,linux/arm64"
    assert build["with"]["tags"] == "${{ matrix.image }}:${{ needs.meta.outputs.version }}"
    assert "PI_VERSION=${{ needs.meta.outputs.pi_version }}" in build["with"]["build-args"]
    assert any(s.get("uses", "").startswith("docker/setup-qemu-action@") for s in images["steps"])
    chart = jobs["chart"]
    assert set(chart["needs"]) == {"meta", "images"}, "the chart is pushed only once its images exist"
    script = "\n".join(s.get("run", "") for s in chart["steps"])
    assert "helm package charts/pi-dispatch" in script and 'helm push' in script and '"$REPO"' in script


def versions_env() -> dict[str, str]:
    text = (ROOT / "e2e" / "controlplane" / "versions.env").read_text()
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line and not line.startswith("#"))


def step_using(steps: list[dict[str, Any]], action: str) -> dict[str, Any]:
    [step] = [s for s in steps if s.get("uses", "").startswith(f"{action}@")]
    return step


def test_release_signs_each_image_by_digest_and_attests_its_sbom_with_the_rehearsed_tools() -> None:
    images = load(WORKFLOWS / "release.yml")["jobs"]["images"]
    steps = images["steps"]
    pinned = versions_env()
    by_digest = "${{ matrix.image }}@${{ steps.build.outputs.digest }}"
    build = step_using(steps, "docker/build-push-action")
    assert build["id"] == "build" and build["with"]["push"] is True
    # the cosign and syft e2e/framework/rehearsal.py runs (built from e2e/controlplane's wrapper modules)
    assert step_using(steps, "sigstore/cosign-installer")["with"]["cosign-release"] == f"v{pinned['COSIGN_VERSION']}"
    sbom = step_using(steps, "anchore/sbom-action")["with"]
    assert sbom["syft-version"] == f"v{pinned['SYFT_VERSION']}"
    assert sbom["image"] == by_digest and sbom["format"] == "spdx-json"
    assert sbom["output-file"] == "${{ runner.temp }}/sbom.spdx.json"
    [sign] = [s for s in steps if "cosign sign" in s.get("run", "")]
    assert sign["env"]["IMAGE"] == by_digest, "signed by digest, never by tag"
    assert sign["env"]["SBOM"] == sbom["output-file"]
    script = sign["run"]
    assert 'cosign sign --yes "$IMAGE"' in script
    assert 'cosign attest --yes --type spdxjson --predicate "$SBOM" "$IMAGE"' in script
    assert script.index("cosign sign") < script.index("cosign attest") < script.index("cosign verify ")
    order = [s.get("id") or s.get("uses", "").split("@")[0] or s.get("name") for s in steps]
    assert order.index("build") < order.index("anchore/sbom-action") < order.index(sign.get("name")), order
    # each leg's digest, under its own name, for the chart job
    assert images["outputs"] == {f"{t}_digest": f"${{{{ steps.out.outputs.{t}_digest }}}}" for t in ("operator", "job")}
    [out] = [s for s in steps if s.get("id") == "out"]
    assert out["env"] == {"TARGET": "${{ matrix.target }}", "DIGEST": "${{ steps.build.outputs.digest }}"}
    assert 'echo "${TARGET}_digest=$DIGEST" >> "$GITHUB_OUTPUT"' in out["run"]


def test_the_chart_is_pushed_only_after_both_images_verify_and_is_signed_by_its_digest() -> None:
    chart = load(WORKFLOWS / "release.yml")["jobs"]["chart"]
    steps = chart["steps"]
    [verify] = [s for s in steps if "cosign verify" in s.get("run", "")]
    [push] = [s for s in steps if "helm push" in s.get("run", "")]
    assert steps.index(verify) < steps.index(push), "the images are verified before the chart names them"
    assert verify["env"]["OPERATOR"] == "${{ needs.meta.outputs.operator_image }}@" \
                                        "${{ needs.images.outputs.operator_digest }}"
    assert verify["env"]["JOB"] == "${{ needs.meta.outputs.job_image }}@${{ needs.images.outputs.job_digest }}"
    assert "cosign verify-attestation --type spdxjson" in verify["run"]
    for script in (verify["run"], next(s for s in load(WORKFLOWS / "release.yml")["jobs"]["images"]["steps"]
                                       if "cosign verify" in s.get("run", ""))["run"]):
        assert "--certificate-oidc-issuer https://token.actions.githubusercontent.com" in script
    assert verify["env"]["IDENTITY"] == "${{ github.server_url }}/${{ github.workflow_ref }}"
    assert 'cosign sign --yes "${REPO#oci://}/pi-dispatch@$digest"' in push["run"]


# ---- release-meta.sh ---------------------------------------------------------------------------------------

def meta(root: Path, tag: str, owner: str = "pi-dispatch") -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(root / ".github" / "scripts" / "release-meta.sh"), tag, owner],
                          capture_output=True, text=True, timeout=30)


def chart_version() -> str:
    return yaml.safe_load((CHART / "Chart.yaml").read_text())["version"]


def test_release_meta_names_what_the_chart_pulls() -> None:
    version = chart_version()
    result = meta(ROOT, f"v{version}", owner="Pi-Dispatch")
    assert result.returncode == 0, result.stderr
    out = dict(line.split("=", 1) for line in result.stdout.splitlines())
    pi = yaml.safe_load((ROOT / "e2e" / "pi" / "package.json").read_text())["dependencies"]
    assert out == {"version": version, "registry": "ghcr.io/pi-dispatch",
                   "operator_image": "ghcr.io/pi-dispatch/operator", "job_image": "ghcr.io/pi-dispatch/job",
                   "chart_repo": "oci://ghcr.io/pi-dispatch/charts",
                   "pi_version": pi["@mariozechner/pi-coding-agent"]}
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert values["image"]["repository"] == out["operator_image"]


def copy_of_what_meta_reads(tmp_path: Path) -> Path:
    for rel in (".github/scripts/release-meta.sh", "charts/pi-dispatch/Chart.yaml", "charts/pi-dispatch/values.yaml",
                "charts/pi-dispatch/templates/_helpers.tpl", "e2e/pi/package.json", "CHANGELOG.md"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / rel, tmp_path / rel)
    return tmp_path


def bump(path: Path, pattern: str, replacement: str) -> None:
    text = path.read_text()
    new = re.sub(pattern, replacement, text, count=1, flags=re.M)
    assert new != text, f"{pattern} not found in {path}"
    path.write_text(new)


# (tag, owner, an edit of the copy or None, what the refusal names)
REFUSED = {
    "a tag other than the chart's version": ("v9.9.9", "pi-dispatch", None, "Chart.yaml version is"),
    "a tag that is not semver": ("v1.0", "pi-dispatch", None, "is not v<major>.<minor>.<patch>"),
    "appVersion behind version": (None, "pi-dispatch", ("charts/pi-dispatch/Chart.yaml", r'^appVersion:.*$',
                                                        'appVersion: "0.0.1"'), "appVersion is '0.0.1'"),
    "another owner than the chart's images": (None, "someone-else", None, "values.yaml image.repository is"),
    "a job image elsewhere": (None, "pi-dispatch", ("charts/pi-dispatch/templates/_helpers.tpl",
                                                    r"ghcr\.io/pi-dispatch/job", "quay.io/x/job"),
                              "default job image is 'quay.io/x/job'"),
    "a changelog that still says unreleased": (None, "pi-dispatch", ("CHANGELOG.md", r"^(## [0-9.]+) — .*$",
                                                                     r"\1 (unreleased)"),
                                               "CHANGELOG.md has no section"),
}


@pytest.mark.parametrize("case", list(REFUSED), ids=list(REFUSED))
def test_release_meta_refuses_a_release_that_disagrees(tmp_path: Path, case: str) -> None:
    tag, owner, edit, says = REFUSED[case]
    root = copy_of_what_meta_reads(tmp_path)
    assert meta(root, f"v{chart_version()}").returncode == 0, "the unedited copy is a valid release"
    if edit is not None:
        bump(root / edit[0], edit[1], edit[2])
    result = meta(root, tag or f"v{chart_version()}", owner)
    assert result.returncode == 1, result.stdout
    assert result.stdout == "", "nothing reaches $GITHUB_OUTPUT from a refused release"
    assert says in result.stderr, result.stderr
