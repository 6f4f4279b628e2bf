#!/usr/bin/env bash
# Refresh the chart's copies of the pi-dispatch CRDs from the repository's top-level crds/ (the one
# source of truth; tests/chart/test_chart.py fails while the copies differ). The operator runs kopf standalone
# (its replicas elect a leader on a Lease), so kopf's peering CRD is no longer shipped.
set -euo pipefail
chart_dir="$(cd "$(dirname "$0")" && pwd)"
source_dir="$(cd "$chart_dir/../.." && pwd)/crds"
shopt -s nullglob
sources=("$source_dir"/pi-dispatch.dev_*.yaml)
if [ "${#sources[@]}" -eq 0 ]; then
    echo "sync-crds: no pi-dispatch.dev_*.yaml in $source_dir" >&2
    exit 1
fi
# A CRD removed from the source must not linger in the chart.
for copy in "$chart_dir"/crds/pi-dispatch.dev_*.yaml; do
    [ -e "$source_dir/$(basename "$copy")" ] || { rm -- "$copy"; echo "removed $(basename "$copy")"; }
done
for src in "${sources[@]}"; do
    cp -- "$src" "$chart_dir/crds/$(basename "$src")"
    echo "copied $(basename "$src")"
done
