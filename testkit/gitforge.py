"""A local git forge for the workspace tests: real repositories, served over git's smart HTTP.

* :class:`Repos` keeps bare repositories under a directory (``<root>/<owner>/<name>.git``) and makes
  commits in them through a scratch clone (a test plays "someone else pushed" with :meth:`Repos.commit`);
  they allow fetching any commit reachable from a ref (``uploadpack.allowReachableSHA1InWant``, as
  GitHub does), so a commit a force-push left behind is refused like on GitHub;
* :func:`serve_git` answers one HTTP request through ``git http-backend`` (the CGI every git server
  wraps), after the caller checked the request's Basic credentials: a push needs them (the backend
  enables ``receive-pack`` only for an authenticated user);
* :func:`make_tls` writes a throwaway CA and a server certificate for 127.0.0.1, for the HTTPS forge
  that ``gh`` needs (it talks HTTPS to any host but github.com).

``FakeGitHubAPI`` (``testkit/fakegithub_api.py``) mounts this under the same host as its REST API, as GitHub
Enterprise serves ``/OWNER/NAME.git`` beside ``/api/v3``.
"""

from __future__ import annotations

import datetime as dt
import os
import subprocess
import tempfile
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler
from pathlib import Path

GIT_ENV = {"GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull, "GIT_TERMINAL_PROMPT": "0",
           "GIT_AUTHOR_NAME": "Someone Else", "GIT_AUTHOR_EMAIL": "someone@example.invalid",
           "GIT_COMMITTER_NAME": "Someone Else", "GIT_COMMITTER_EMAIL": "someone@example.invalid"}


def git(*args: str, cwd: Path | str | None = None, check: bool = True, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=False,
                          env={**os.environ, **GIT_ENV, **(env or {})})
    if check and done.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)}: {done.stderr.strip()}")
    return done.stdout.strip()


class Repos:
    """Bare repositories ``<root>/<owner>/<name>.git``."""

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)

    def path(self, full_name: str) -> Path:
        return self.root / f"{full_name}.git"

    def exists(self, full_name: str) -> bool:
        return (self.path(full_name) / "HEAD").is_file()

    def create(self, full_name: str, files: dict[str, str] | None = None, *, default_branch: str = "main") -> str:
        """A repository with one commit on ``default_branch``; returns the commit."""
        bare = self.path(full_name)
        bare.parent.mkdir(parents=True, exist_ok=True)
        git("init", "--quiet", "--bare", f"--initial-branch={default_branch}", str(bare))
        git("config", "uploadpack.allowReachableSHA1InWant", "true", cwd=bare)
        git("config", "http.receivepack", "true", cwd=bare)
        return self.commit(full_name, default_branch, files or {"README.md": f"# {full_name}\n"},
                           "Initial commit", start=None)

    def commit(self, full_name: str, branch: str, files: dict[str, str], message: str, *,
               start: str | None = "", force_from: str | None = None) -> str:
        """Commit ``files`` on ``branch`` (created from ``start``, default the default branch) and push it.

        ``force_from``: rewrite the branch from that commit instead of its tip (a force-push)."""
        with tempfile.TemporaryDirectory(prefix="gitforge-") as scratch:
            work = Path(scratch)
            git("init", "--quiet", str(work))
            git("remote", "add", "origin", str(self.path(full_name)), cwd=work)
            base = force_from or (self.tip(full_name, branch) if start == "" else start)
            if base is None and start == "":
                base = self.tip(full_name, self.default_branch(full_name))
            if base is not None:
                git("fetch", "--quiet", "origin", base, cwd=work)
                git("checkout", "--quiet", "-B", branch, base, cwd=work)
            else:
                git("checkout", "--quiet", "--orphan", branch, cwd=work)
            for name, text in files.items():
                (work / name).parent.mkdir(parents=True, exist_ok=True)
                (work / name).write_text(text)
                git("add", "--", name, cwd=work)
            git("commit", "--quiet", "-m", message, cwd=work)
            git("push", "--quiet", "--force", "origin", f"HEAD:refs/heads/{branch}", cwd=work)
            return git("rev-parse", "HEAD", cwd=work)

    def commit_tree(self, full_name: str, branch: str, build: Callable[[Path], None], message: str) -> str:
        """Commit on ``branch`` (from the default branch's tip) whatever ``build`` makes in the work tree:
        symbolic links, executables, or index entries it adds with git itself (a submodule's gitlink)."""
        with tempfile.TemporaryDirectory(prefix="gitforge-") as scratch:
            work = Path(scratch)
            git("init", "--quiet", str(work))
            git("remote", "add", "origin", str(self.path(full_name)), cwd=work)
            base = self.tip(full_name, self.default_branch(full_name))
            git("fetch", "--quiet", "origin", str(base), cwd=work)
            git("checkout", "--quiet", "-B", branch, str(base), cwd=work)
            build(work)
            git("add", "-A", cwd=work)
            git("commit", "--quiet", "-m", message, cwd=work)
            git("push", "--quiet", "--force", "origin", f"HEAD:refs/heads/{branch}", cwd=work)
            return git("rev-parse", "HEAD", cwd=work)

    def tip(self, full_name: str, branch: str) -> str | None:
        return self.resolve(full_name, f"refs/heads/{branch}")

    def resolve(self, full_name: str, ref: str) -> str | None:
        out = git("rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}", cwd=self.path(full_name), check=False)
        return out or None

    def default_branch(self, full_name: str) -> str:
        return git("symbolic-ref", "--short", "HEAD", cwd=self.path(full_name))

    def prune(self, full_name: str) -> None:
        """Drop every object no ref reaches (GitHub serves a force-pushed-away commit by id until it is
        collected, as git's protocol v2 does: a "gone" commit is one that was collected)."""
        bare = self.path(full_name)
        git("reflog", "expire", "--expire=now", "--all", cwd=bare)
        git("gc", "--quiet", "--prune=now", cwd=bare)

    def set_ref(self, full_name: str, ref: str, sha: str) -> None:
        git("update-ref", ref, sha, cwd=self.path(full_name))

    def log(self, full_name: str, branch: str) -> list[str]:
        """``<sha> <subject>`` of each commit on ``branch``, newest first."""
        out = git("log", "--format=%H %s", f"refs/heads/{branch}", cwd=self.path(full_name), check=False)
        return out.splitlines()

    def count(self, full_name: str, base: str, head: str) -> tuple[int, int] | None:
        """(ahead_by, behind_by) of ``head`` against ``base``; ``None`` when either is unknown here."""
        out = git("rev-list", "--left-right", "--count", f"{base}...{head}", cwd=self.path(full_name), check=False)
        parts = out.split()
        return (int(parts[1]), int(parts[0])) if len(parts) == 2 else None

    def commit_fields(self, full_name: str, sha: str) -> dict[str, object]:
        """What GitHub's commit object says of commit ``sha``: its tree, parents, author, committer, message."""
        out = git("show", "-s", "--format=%H%x00%T%x00%P%x00%an%x00%ae%x00%aI%x00%cn%x00%ce%x00%cI%x00%B", sha,
                  cwd=self.path(full_name))
        full, tree, parents, an, ae, ad, cn, ce, cd, message = out.split("\x00", 9)
        return {"sha": full, "tree": tree, "parents": parents.split(), "message": message.strip(),
                "author": {"name": an, "email": ae, "date": ad}, "committer": {"name": cn, "email": ce, "date": cd}}

    def between(self, full_name: str, base: str, head: str) -> tuple[str | None, list[str]]:
        """(merge base, the commits of ``head`` not in ``base``, oldest first) -- what a comparison lists."""
        bare = self.path(full_name)
        merge_base = git("merge-base", base, head, cwd=bare, check=False) or None
        commits = git("rev-list", "--reverse", f"{base}..{head}", cwd=bare, check=False).split()
        return merge_base, commits

    def has_commit(self, full_name: str, sha: str) -> bool:
        return subprocess.run(["git", "cat-file", "-e", f"{sha}^{{commit}}"], cwd=self.path(full_name),
                              capture_output=True, check=False).returncode == 0


def git_path(path: str) -> tuple[str, str] | None:
    """``("owner/name", rest)`` of a smart-HTTP path ``/owner/name.git/<rest>``, else ``None``."""
    parts = path.split("/")
    if len(parts) < 4 or not parts[2].endswith(".git") or parts[1] in ("api", "repos", "app"):
        return None
    return f"{parts[1]}/{parts[2][:-4]}", "/".join(parts[3:])


def serve_git(h: BaseHTTPRequestHandler, repos: Repos, full_name: str, rest: str, query: str, body: bytes,
              user: str | None) -> None:
    """Answer ``h`` through ``git http-backend``; ``user`` is the authenticated user (None: anonymous)."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "GIT_PROJECT_ROOT": str(repos.root),
           "GIT_HTTP_EXPORT_ALL": "1", "PATH_INFO": f"/{full_name}.git/{rest}", "REQUEST_METHOD": h.command,
           "QUERY_STRING": query, "CONTENT_TYPE": h.headers.get("Content-Type", ""),
           "CONTENT_LENGTH": str(len(body)), "REMOTE_ADDR": "127.0.0.1", "GIT_CONFIG_NOSYSTEM": "1",
           "GIT_CONFIG_GLOBAL": os.devnull, "HOME": str(repos.root)}
    if user:
        env["REMOTE_USER"] = user
    if h.headers.get("Git-Protocol"):
        env["GIT_PROTOCOL"] = h.headers["Git-Protocol"]
    if h.headers.get("Content-Encoding"):
        env["HTTP_CONTENT_ENCODING"] = h.headers["Content-Encoding"]
    done = subprocess.run(["git", "http-backend"], input=body, env=env, capture_output=True, check=False, timeout=120)
    head, _, payload = done.stdout.partition(b"\r\n\r\n")
    if not _ and b"\n\n" in done.stdout:
        head, _, payload = done.stdout.partition(b"\n\n")
    status, headers = 200, []
    for line in head.decode("latin-1").splitlines():
        name, _, value = line.partition(":")
        if name.lower() == "status":
            status = int(value.strip().split()[0])
        elif name:
            headers.append((name.strip(), value.strip()))
    h.send_response(status)
    for name, value in headers:
        h.send_header(name, value)
    h.send_header("Content-Length", str(len(payload)))
    h.end_headers()
    h.wfile.write(payload)


def read_body(h: BaseHTTPRequestHandler) -> bytes:
    """The request body, ``Content-Length`` or chunked (git sends large pushes chunked)."""
    if h.headers.get("Transfer-Encoding", "").lower() == "chunked":
        out = bytearray()
        while True:
            size = int(h.rfile.readline().split(b";")[0].strip() or b"0", 16)
            if size == 0:
                h.rfile.readline()
                return bytes(out)
            out += h.rfile.read(size)
            h.rfile.readline()
    length = int(h.headers.get("Content-Length") or 0)
    return h.rfile.read(length) if length else b""


def make_tls(directory: Path, ips: tuple[str, ...] = ("127.0.0.1",)) -> tuple[Path, Path, Path]:
    """(CA certificate, server certificate, server key) for ``ips`` and localhost, valid for a day."""
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    directory.mkdir(parents=True, exist_ok=True)
    now = dt.datetime.now(dt.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "pi-dispatch test forge CA")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
          .serial_number(x509.random_serial_number()).not_valid_before(now - dt.timedelta(minutes=5))
          .not_valid_after(now + dt.timedelta(days=1))
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                       content_commitment=False, key_encipherment=False, data_encipherment=False,
                                       key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
          .sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")]))
            .issuer_name(ca_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([*(x509.IPAddress(ipaddress.ip_address(ip)) for ip in ips),
                                                        x509.DNSName("localhost")]), critical=False)
            .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .sign(ca_key, hashes.SHA256()))
    paths = directory / "ca.crt", directory / "server.crt", directory / "server.key"
    paths[0].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    paths[2].write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return paths
