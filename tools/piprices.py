"""``python -m tools.piprices [--check]``: write ``operator/pidispatch/gateway/prices.json`` from the installed pi.

The gateway prices a reply as pi does (``calculateCost`` in ``@mariozechner/pi-ai``: each kind of token at its
price per million), so its cost of a job equals the transcript's. The prices are pi's own, read from its
``models.generated.js`` for the providers the gateway serves (``gateway/providers.py BUILTIN``); re-run this
after pinning another pi (``make pi``) and commit the file. ``tests/gateway/test_gateway_prices.py`` holds the file to
the installed pi.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PI_AI = ROOT / "e2e" / "pi" / "node_modules" / "@mariozechner" / "pi-ai" / "dist"
PRICES = ROOT / "operator" / "pidispatch" / "gateway" / "prices.json"

_DUMP = """
const { MODELS } = await import(process.argv[1] + "/models.generated.js");
const out = {};
for (const [provider, models] of Object.entries(MODELS)) {
  out[provider] = {};
  for (const [id, m] of Object.entries(models)) {
    const c = m.cost || {};
    out[provider][id] = [c.input ?? 0, c.output ?? 0, c.cacheRead ?? 0, c.cacheWrite ?? 0];
  }
}
console.log(JSON.stringify(out));
"""


def pis_prices(providers: list[str]) -> dict[str, dict[str, list[float]]]:
    """``{provider: {model: [input, output, cacheRead, cacheWrite]}}`` in USD per million tokens, as the
    installed pi has them, for ``providers``. Raises ``FileNotFoundError`` when pi or Node.js is missing."""
    node = shutil.which("node")
    if node is None or not PI_AI.is_dir():
        raise FileNotFoundError(f"pi is not installed at {PI_AI} (make pi), or node is missing")
    done = subprocess.run([node, "--input-type=module", "-e", _DUMP, str(PI_AI)], capture_output=True, text=True,
                          timeout=60, check=True)
    table = json.loads(done.stdout)
    return {name: dict(sorted(table[name].items())) for name in sorted(providers) if name in table}


def render(prices: dict[str, dict[str, list[float]]]) -> str:
    """One line per model: a diff after a pi upgrade shows which prices moved."""
    lines = ["{"]
    for i, (provider, models) in enumerate(prices.items()):
        lines.append(f"  {json.dumps(provider)}: {{")
        for j, (model, price) in enumerate(models.items()):
            comma = "," if j < len(models) - 1 else ""
            lines.append(f"    {json.dumps(model)}: {json.dumps(price)}{comma}")
        lines.append("  }" + ("," if i < len(prices) - 1 else ""))
    lines.append("}")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.piprices", description=__doc__)
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if the file is out of date")
    args = parser.parse_args(argv)
    from pidispatch.gateway.providers import BUILTIN

    text = render(pis_prices(list(BUILTIN)))
    if args.check:
        if PRICES.read_text() != text:
            print(f"{PRICES.relative_to(ROOT)} is out of date: run `python -m tools.piprices`", file=sys.stderr)
            return 1
        return 0
    PRICES.write_text(text)
    print(f"wrote {PRICES.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
