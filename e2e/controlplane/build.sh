#!/usr/bin/env bash
# Build (or reuse) the pinned control-plane binaries:
#   kube-apiserver kube-controller-manager kubectl   (wrapper module k8s/)
#   kubelet kube-scheduler                           (wrapper module k8s/: the real node)
#   etcd                                             (wrapper module etcd/)
#   helm                                             (wrapper module helm/)
#   actionlint                                       (wrapper module actionlint/: tests/test_workflows.py)
#   registry                                         (wrapper module registry/: e2e/test_pull_secret.py)
#   dashcheck                                        (module dashcheck/: tests/chart/test_chart_dashboard.py)
#   cosign syft                                      (wrapper modules cosign/, syft/: e2e/framework/rehearsal.py)
#   kube-router                                      (wrapper module kuberouter/: e2e/framework/netpolicy.py)
# into  ${PIDISPATCH_CACHE:-~/.cache/pidispatch}/k8s-v<K>_etcd-v<E>_helm-v<H>/bin
# A binary is rebuilt only when missing or when its wrapper module's go.mod/go.sum (and its own .go
# files, for dashcheck/, the one module with source of ours) changed (a stamp file next to it records
# their hash), so a second run builds nothing. Prints the bin dir on the last line of stdout.
#
# Usage: build.sh [--print-bin-dir]   (the flag only prints the directory)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=versions.env
. "$here/versions.env"
export PATH="/usr/local/go/bin:$PATH"
export GOTOOLCHAIN="${GOTOOLCHAIN:-local}" CGO_ENABLED=0 GOFLAGS="-mod=readonly"

cache_root="${PIDISPATCH_CACHE:-$HOME/.cache/pidispatch}"
bin_dir="$cache_root/k8s-v${K8S_VERSION}_etcd-v${ETCD_VERSION}_helm-v${HELM_VERSION}/bin"
if [ "${1:-}" = "--print-bin-dir" ]; then echo "$bin_dir"; exit 0; fi

command -v go >/dev/null || { echo "go not found (expected /usr/local/go/bin/go)" >&2; exit 1; }
mkdir -p "$bin_dir"
minor="${K8S_VERSION#*.}"; minor="${minor%%.*}"
k8s_ldflags="-s -w -X k8s.io/component-base/version.gitVersion=v$K8S_VERSION \
 -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor \
 -X k8s.io/component-base/version.gitTreeState=clean"

total_start=$(date +%s)
built=0
build() {  # name module-dir package ldflags
    local name="$1" dir="$2" pkg="$3" ldflags="$4"
    local stamp="$bin_dir/.$name.stamp" want
    # the .go files in the module's own directory (none in the wrappers: their hash is that of go.mod/go.sum)
    want="$(cd "$here/$dir" && find . -maxdepth 1 -name '*.go' | LC_ALL=C sort | xargs cat go.mod go.sum \
        | sha256sum | cut -d' ' -f1) $(go env GOVERSION)"
    if [ -x "$bin_dir/$name" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
        echo "[controlplane] $name: cached ($bin_dir/$name)" >&2
        return 0
    fi
    local t0; t0=$(date +%s)
    echo "[controlplane] $name: building $pkg ..." >&2
    # go build is silent for minutes: say every minute that it is still going
    ( while sleep 60; do echo "[controlplane] $name: still building ($(( $(date +%s) - t0 ))s)" >&2; done ) &
    local ticker=$!
    local rc=0
    (cd "$here/$dir" && go build -trimpath -ldflags "$ldflags" -o "$bin_dir/.$name.tmp" "$pkg") || rc=$?
    kill "$ticker" 2>/dev/null; wait "$ticker" 2>/dev/null || true
    if [ "$rc" -ne 0 ]; then
        echo "[controlplane] $name: build FAILED after $(( $(date +%s) - t0 ))s" >&2
        exit "$rc"
    fi
    mv -f "$bin_dir/.$name.tmp" "$bin_dir/$name"
    echo "$want" > "$stamp"
    built=$((built + 1))
    echo "[controlplane] $name: built in $(( $(date +%s) - t0 ))s ($(du -m "$bin_dir/$name" | cut -f1) MB)" >&2
}

build etcd etcd go.etcd.io/etcd/server/v3 "-s -w"
build kube-apiserver k8s k8s.io/kubernetes/cmd/kube-apiserver "$k8s_ldflags"
build kube-controller-manager k8s k8s.io/kubernetes/cmd/kube-controller-manager "$k8s_ldflags"
build kubectl k8s k8s.io/kubernetes/cmd/kubectl "$k8s_ldflags"
# the real node (e2e/framework/realnode.py): the kubelet that runs Pods in containerd, and the scheduler
build kubelet k8s k8s.io/kubernetes/cmd/kubelet "$k8s_ldflags"
build kube-scheduler k8s k8s.io/kubernetes/cmd/kube-scheduler "$k8s_ldflags"
build helm helm helm.sh/helm/v3/cmd/helm "-s -w -X helm.sh/helm/v3/internal/version.version=v$HELM_VERSION"
# the workflow linter of .github/workflows (`make test` runs it through tests/test_workflows.py)
build actionlint actionlint github.com/rhysd/actionlint/cmd/actionlint \
    "-s -w -X github.com/rhysd/actionlint.version=$ACTIONLINT_VERSION"

# the private registry the real node pulls from with an imagePullSecret (e2e/test_pull_secret.py)
build registry registry github.com/distribution/distribution/v3/cmd/registry \
    "-s -w -X github.com/distribution/distribution/v3/version.version=v$REGISTRY_VERSION"

# the Grafana dashboard's schema check (tests/chart/test_chart_dashboard.py): Grafana's dashboard schema as the
# foundation SDK's Go types, strictly decoded; main.go is ours
build dashcheck dashcheck . "-s -w"

# the release's signing and SBOM tools, as .github/workflows/release.yml runs them (make release-rehearsal)
build cosign cosign github.com/sigstore/cosign/v3/cmd/cosign \
    "-s -w -X sigs.k8s.io/release-utils/version.gitVersion=v$COSIGN_VERSION"
build syft syft github.com/anchore/syft/cmd/syft "-s -w -X main.version=$SYFT_VERSION"

# the real node's NetworkPolicy implementation: kube-router's firewall (e2e/framework/netpolicy.py)
build kube-router kuberouter github.com/cloudnativelabs/kube-router/v2/cmd/kube-router \
    "-s -w -X github.com/cloudnativelabs/kube-router/v2/pkg/version.Version=v$KUBE_ROUTER_VERSION"

echo "[controlplane] $built binaries built, total $(( $(date +%s) - total_start ))s; bin dir:" >&2
echo "$bin_dir"
