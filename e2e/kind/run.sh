#!/usr/bin/env bash
# Run the e2e suite against a kind cluster, for machines with Docker and kind (CI has neither and
# uses the local control plane instead). Tests that need the test kubelet (Pods as local processes,
# host-side volume checks) are skipped there; everything else runs unchanged.
#
#   e2e/kind/run.sh [pytest args]        KIND_CLUSTER=name  KIND_NODE_IMAGE=kindest/node:vX.Y.Z
#                                        KEEP_CLUSTER=1 keeps a cluster this script created
set -euo pipefail
cd "$(dirname "$0")/../.."
# shellcheck source=../controlplane/versions.env
. e2e/controlplane/versions.env
for tool in docker kind kubectl; do
    command -v "$tool" >/dev/null || { echo "$tool not found on PATH" >&2; exit 1; }
done
name="${KIND_CLUSTER:-pidispatch-e2e}"
image="${KIND_NODE_IMAGE:-kindest/node:v$K8S_VERSION}"
kubeconfig="$(mktemp)"
created=0
cleanup() {
    if [ "$created" = 1 ] && [ -z "${KEEP_CLUSTER:-}" ]; then kind delete cluster --name "$name"; fi
    rm -f "$kubeconfig"
}
trap cleanup EXIT
if kind get clusters 2>/dev/null | grep -qx "$name"; then
    kind get kubeconfig --name "$name" > "$kubeconfig"
else
    created=1
    kind create cluster --name "$name" --image "$image" --wait 180s --kubeconfig "$kubeconfig"
fi
make venv
PIDISPATCH_E2E_KUBECONFIG="$kubeconfig" .venv/bin/python -m pytest e2e -m e2e "$@"
