"""The local forge as a process, for ``make demo``: HTTPS on 127.0.0.1 with a throwaway CA, real git
repositories behind smart HTTP, and the fake GitHub API in GitHub Enterprise's layout (``/api/v3``).

    python -m testkit.forge_server --dir D --pat TOKEN --repo octo/repo --issue '7=The cache test is flaky'

writes ``D/forge.json`` (``web_url``, ``api_url``, ``host``, ``ca``) once it serves, and runs until it
is sent SIGTERM. The repositories live in ``D/repos/<owner>/<name>.git``.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
from pathlib import Path

from testkit.fakegithub_api import FakeGitHubAPI
from testkit.gitforge import Repos, make_tls


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", required=True, type=Path)
    parser.add_argument("--pat", required=True, help="the token jobs and the operator use")
    parser.add_argument("--repo", action="append", default=[], help="OWNER/NAME, created with one commit")
    parser.add_argument("--issue", action="append", default=[], help="N=TITLE for the first --repo")
    parser.add_argument("--host", default="127.0.0.1", help="the address to listen on (a real node's, for its Pods)")
    args = parser.parse_args(argv)
    ca, cert, key = make_tls(args.dir / "tls", ips=tuple(dict.fromkeys(("127.0.0.1", args.host))))
    repos = Repos(args.dir / "repos")
    for full in args.repo:
        if not repos.exists(full):
            repos.create(full, {"README.md": f"# {full}\n", "cache.py": "CACHE = {}\n"})
    api = FakeGitHubAPI(pats={args.pat}, repos=repos, tls=(str(cert), str(key)), prefix="/api/v3",
                         bind=args.host).start()
    for spec in args.issue:
        number, _, title = spec.partition("=")
        api.set_issue(args.repo[0], int(number), title, "Reported by the demo.")
    (args.dir / "forge.json").write_text(json.dumps({"web_url": api.web_url, "api_url": api.url, "host": api.host,
                                                     "ca": str(ca)}))
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    stop.wait()
    api.stop()
    for error in api.violations:  # answered 500 when met; said again here, and the exit status says so
        print(f"forge_server: {error}", file=sys.stderr)
    return 1 if api.violations else 0


if __name__ == "__main__":
    raise SystemExit(main())
