#!/usr/bin/env bash
# Regenerate the wrapper Go modules that pin the control-plane binaries.
#
#   k8s/   requires k8s.io/kubernetes v$K8S_VERSION (apiserver, controller-manager, kubectl, and the
#          real node's kubelet and kube-scheduler); the replace list is generated
#          from that release's own go.mod: every `k8s.io/<m> => ./staging/...`
#          line becomes `k8s.io/<m> => k8s.io/<m> v0.<minor>.<patch>`.
#   etcd/  requires go.etcd.io/etcd/server/v3 v$ETCD_VERSION (its own go.mod has
#          relative replaces, so `go install` refuses it).
#   helm/  requires helm.sh/helm/v3 v$HELM_VERSION (separate module so its k8s.io
#          dependencies do not collide with the kubernetes release above).
#   actionlint/  requires github.com/rhysd/actionlint v$ACTIONLINT_VERSION (the workflow linter).
#   registry/  requires github.com/distribution/distribution/v3 v$REGISTRY_VERSION (the private registry of
#          e2e/test_pull_secret.py).
#   dashcheck/  requires github.com/grafana/grafana-foundation-sdk/go v$GRAFANA_SDK_VERSION (the dashboard
#          schema check of tests/chart/test_chart_dashboard.py); its main.go is ours and is kept.
#   cosign/  requires github.com/sigstore/cosign/v3 v$COSIGN_VERSION (signs and verifies the rehearsed release,
#          e2e/framework/rehearsal.py).
#   syft/  requires github.com/anchore/syft v$SYFT_VERSION (the images' SBOMs, e2e/framework/rehearsal.py).
#   kuberouter/  requires github.com/cloudnativelabs/kube-router/v2 v$KUBE_ROUTER_VERSION (the real node's
#          NetworkPolicy implementation, e2e/framework/netpolicy.py).
#
# Re-runnable: edit versions.env, run this script, commit */go.mod */go.sum.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=versions.env
. "$here/versions.env"
export PATH="/usr/local/go/bin:$PATH" GOTOOLCHAIN="${GOTOOLCHAIN:-local}" GOFLAGS=-mod=mod

minor_patch="${K8S_VERSION#*.}"            # 36.3
staging_version="v0.${minor_patch}"        # v0.36.3

gomod_of() {  # print the path of the downloaded .mod file of module@version
    go mod download -json "$1" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",\{0,1\}$/\1/p'
}

new_module() {  # dir modulepath
    rm -f "$here/$1/go.mod" "$here/$1/go.sum"
    mkdir -p "$here/$1"
    (cd "$here/$1" && go mod init "$2" >/dev/null 2>&1 && go mod edit -go=1.26.0)
}

echo "== k8s wrapper: k8s.io/kubernetes v$K8S_VERSION, staging modules at $staging_version"
new_module k8s pidispatch.invalid/controlplane/k8s
kk_mod="$(gomod_of "k8s.io/kubernetes@v$K8S_VERSION")"
[ -s "$kk_mod" ] || { echo "cannot download go.mod of k8s.io/kubernetes@v$K8S_VERSION" >&2; exit 1; }
staging=$(sed -n 's|^[[:space:]]*\(k8s\.io/[A-Za-z0-9._-]*\)[[:space:]]*=>[[:space:]]*\./staging/.*|\1|p' "$kk_mod" | sort -u)
[ -n "$staging" ] || { echo "no staging replaces found in $kk_mod" >&2; exit 1; }
(
    cd "$here/k8s"
    go mod edit -require="k8s.io/kubernetes@v$K8S_VERSION"
    args=()
    for m in $staging; do args+=("-replace=$m=$m@$staging_version"); done
    go mod edit "${args[@]}"
    # copy the release's godebug line (dependencies' godebug lines are ignored)
    gd=$(sed -n 's/^godebug[[:space:]]\{1,\}\(.*\)$/\1/p' "$kk_mod" | head -1)
    [ -z "$gd" ] || go mod edit -godebug="$gd"
    go get -tool \
        "k8s.io/kubernetes/cmd/kube-apiserver@v$K8S_VERSION" \
        "k8s.io/kubernetes/cmd/kube-controller-manager@v$K8S_VERSION" \
        "k8s.io/kubernetes/cmd/kubectl@v$K8S_VERSION" \
        "k8s.io/kubernetes/cmd/kubelet@v$K8S_VERSION" \
        "k8s.io/kubernetes/cmd/kube-scheduler@v$K8S_VERSION"
    go mod tidy
)
echo "   $(echo "$staging" | wc -l) staging replaces"

echo "== etcd wrapper: go.etcd.io/etcd/server/v3 v$ETCD_VERSION"
new_module etcd pidispatch.invalid/controlplane/etcd
(
    cd "$here/etcd"
    go get -tool "go.etcd.io/etcd/server/v3@v$ETCD_VERSION"
    go mod tidy
)

echo "== helm wrapper: helm.sh/helm/v3 v$HELM_VERSION"
new_module helm pidispatch.invalid/controlplane/helm
(
    cd "$here/helm"
    go get -tool "helm.sh/helm/v3/cmd/helm@v$HELM_VERSION"
    go mod tidy
)
echo "== actionlint wrapper: github.com/rhysd/actionlint v$ACTIONLINT_VERSION"
new_module actionlint pidispatch.invalid/controlplane/actionlint
(
    cd "$here/actionlint"
    go get -tool "github.com/rhysd/actionlint/cmd/actionlint@v$ACTIONLINT_VERSION"
    go mod tidy
)
echo "== registry wrapper: github.com/distribution/distribution/v3 v$REGISTRY_VERSION"
new_module registry pidispatch.invalid/controlplane/registry
(
    cd "$here/registry"
    go get -tool "github.com/distribution/distribution/v3/cmd/registry@v$REGISTRY_VERSION"
    go mod tidy
)
echo "== dashcheck: github.com/grafana/grafana-foundation-sdk/go v$GRAFANA_SDK_VERSION"
new_module dashcheck pidispatch.invalid/controlplane/dashcheck
(
    cd "$here/dashcheck"
    go get "github.com/grafana/grafana-foundation-sdk/go@v$GRAFANA_SDK_VERSION"
    go mod tidy
)
echo "== cosign wrapper: github.com/sigstore/cosign/v3 v$COSIGN_VERSION"
new_module cosign pidispatch.invalid/controlplane/cosign
(
    cd "$here/cosign"
    go get -tool "github.com/sigstore/cosign/v3/cmd/cosign@v$COSIGN_VERSION"
    go mod tidy
)
echo "== syft wrapper: github.com/anchore/syft v$SYFT_VERSION"
new_module syft pidispatch.invalid/controlplane/syft
(
    cd "$here/syft"
    go get -tool "github.com/anchore/syft/cmd/syft@v$SYFT_VERSION"
    go mod tidy
)
echo "== kuberouter wrapper: github.com/cloudnativelabs/kube-router/v2 v$KUBE_ROUTER_VERSION"
new_module kuberouter pidispatch.invalid/controlplane/kuberouter
(
    cd "$here/kuberouter"
    go get -tool "github.com/cloudnativelabs/kube-router/v2/cmd/kube-router@v$KUBE_ROUTER_VERSION"
    go mod tidy
)
echo "== done; commit e2e/controlplane/{k8s,etcd,helm,actionlint,registry,dashcheck,cosign,syft,kuberouter}/go.{mod,sum}"
