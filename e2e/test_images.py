"""The Dockerfile's two images, built here with no registry (``make images``), run as a node would run them.

Part of ``make test``, which runs ``make images`` first (a few minutes cold; then ``e2e/images/build.sh``
finds them cached); ``pytest -m images`` selects these checks alone. Each check is a
``podman run --pull=never`` with runc, no network, as uid 65532 and with nothing but the image's own
binaries: no shell, no root.
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

pytestmark = pytest.mark.images

REPO = Path(__file__).resolve().parents[1]
BUILD = REPO / "e2e" / "images" / "build.sh"
UID = "65532"
PINNED_PI = json.loads((REPO / "e2e" / "pi" / "package.json").read_text())["dependencies"][
    "@mariozechner/pi-coding-agent"
]
# Debian bookworm's gh, which the job stage pins (GH_VERSION).
PINNED_GH = "2.23.0"


@dataclass(frozen=True)
class Images:
    env: dict[str, str]
    operator: str
    job: str


@pytest.fixture(scope="module")
def images(request: pytest.FixtureRequest) -> Images:
    # `make test` builds them first (`make images`); run alone, the build below does (minutes cold, cached after).
    if os.geteuid() != 0:
        pytest.skip("building and running the images here needs root (debootstrap, overlay storage, runc)")
    subprocess.run(["bash", str(BUILD)], check=True)  # cached: under a second when nothing changed
    printed = subprocess.run(["bash", str(BUILD), "--print-env"], check=True, capture_output=True, text=True)
    values = dict(line.split("=", 1) for line in printed.stdout.splitlines())
    env = {**os.environ, **{k: v for k, v in values.items() if k.startswith("CONTAINERS_")}}
    return Images(env=env, operator=values["OPERATOR_IMAGE"], job=values["JOB_IMAGE"])


def run(images: Images, image: str, entrypoint: str, *args: str, extra: tuple[str, ...] = (),
        stream: str = "stdout") -> str:
    """`entrypoint args` in a fresh container of ``image``; what it printed on ``stream``, or a failure."""
    cmd = ["podman", "run", "--rm", "--pull=never", "--network=none", "--cap-drop=ALL",
           "--security-opt=no-new-privileges", *extra, "--entrypoint", entrypoint, image, *args]
    p = subprocess.run(cmd, env=images.env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, f"{' '.join(cmd)} exited {p.returncode}:\n{p.stdout}\n{p.stderr}"
    return p.stdout if stream == "stdout" else p.stderr


def inspect(images: Images, image: str) -> dict:
    p = subprocess.run(["podman", "image", "inspect", image], env=images.env, capture_output=True, text=True,
                       check=True)
    return json.loads(p.stdout)[0]


# The operator runs with a read-only root filesystem and an emptyDir at /tmp (the chart); the job does not.
OPERATOR_FS = ("--read-only", "--tmpfs=/tmp")


@pytest.mark.parametrize("target", ["operator", "job"])
def test_image_is_configured_to_run_as_the_non_root_uid(images: Images, target: str) -> None:
    # Numeric uid:gid, so a kubelet can prove runAsNonRoot from the image alone.
    config = inspect(images, getattr(images, target))["Config"]
    assert config["User"] == f"{UID}:{UID}"


@pytest.mark.parametrize(
    "target,entrypoint",
    [("operator", ["pidispatch", "operator"]), ("job", ["pidispatch", "runner"])],
    ids=["operator-runs-the-operator", "job-runs-the-runner"],
)
def test_entrypoint_is_an_exec_form_command_not_a_shell(images: Images, target: str, entrypoint: list[str]) -> None:
    config = inspect(images, getattr(images, target))["Config"]
    assert [*config.get("Entrypoint", []), *(config.get("Cmd") or [])] == entrypoint


@pytest.mark.parametrize(
    "target,extra",
    [("operator", OPERATOR_FS), ("job", ()),
     ("operator", (f"--user={UID}:{UID}", *OPERATOR_FS)), ("job", (f"--user={UID}:{UID}",))],
    ids=["operator-default-user", "job-default-user", "operator-user-65532", "job-user-65532"],
)
def test_image_runs_as_uid_65532(images: Images, target: str, extra: tuple[str, ...]) -> None:
    out = run(images, getattr(images, target), "id", extra=extra)
    assert out.split()[:2] == [f"uid={UID}(pidispatch)", f"gid={UID}(pidispatch)"], out


def test_operator_image_runs_pidispatch_help(images: Images) -> None:
    out = run(images, images.operator, "pidispatch", "--help", extra=OPERATOR_FS)
    assert "usage: pidispatch" in out, out
    # The C module was built into the image (the build stage asserts it too; this is the runtime copy).
    run(images, images.operator, "python", "-c",
        "from pidispatch.transcript import compaction; assert compaction.NATIVE_SEARCH", extra=OPERATOR_FS)


def test_job_image_runs_the_pinned_pi(images: Images) -> None:
    # pi prints its version on stderr (as `make pi` reads it).
    out = run(images, images.job, "pi", "--version", stream="stderr")
    assert out.strip().splitlines()[-1:] == [PINNED_PI], out
    assert inspect(images, images.job)["Config"]["Labels"]["dev.pi-dispatch.pi-version"] == PINNED_PI


@pytest.mark.parametrize(
    "tool,args,expect",
    [("gh", ("--version",), f"gh version {PINNED_GH}"), ("git", ("--version",), "git version 2."),
     ("node", ("--version",), "v20."), ("pidispatch", ("runner", "--help"), "usage: pidispatch runner")],
    ids=["gh-pinned", "git", "node-20", "runner"],
)
def test_job_image_has_its_tools(images: Images, tool: str, args: tuple[str, ...], expect: str) -> None:
    out = run(images, images.job, tool, *args)
    assert out.startswith(expect), out
