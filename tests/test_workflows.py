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

def test_release_runs_on_a_version_tag_with_least_privilege() -> None:
    release = load(WORKFLOWS / "release.yml")
    assert release["on"] == {"push": {"tags": ["v*"]}}
    assert release["permissions"] == {"contents": "read"}
    for name, job in release["jobs"].items():
        granted = job.get("permissions")
        assert granted is not None, f"job {name} inherits permissions instead of naming them"
        assert set(granted.items()) <= {("contents", "read"), ("packages", "write")}, (name, granted)


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
                "charts/pi-dispatch/templates/_helpers.tpl", "e2e/pi/package.json"):
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
