"""``python -m tools.docsgen [--check]``: write the generated reference pages, or check them (see the package)."""

from __future__ import annotations

import argparse
import sys

from tools.docsgen import REGENERATE_COMMAND, ROOT, stale, write


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.docsgen", description=__doc__)
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if a page is out of date")
    args = parser.parse_args(argv)
    if args.check:
        old = stale()
        for path in old:
            print(f"{path.relative_to(ROOT)} is out of date: run `{REGENERATE_COMMAND}`", file=sys.stderr)
        return 1 if old else 0
    for path in write():
        print(f"wrote {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
