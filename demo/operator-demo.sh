#!/usr/bin/env bash
# The operator's main job, end to end, on the local control plane (kube-apiserver + etcd +
# kube-controller-manager, started by `make cluster-up`) with a real node where this machine allows it
# (kubelet + containerd + runc running the chart's images, `make images`), else the test kubelet:
#   a local forge (testkit/forge_server.py: HTTPS, real git repositories, GitHub Enterprise's API layout) ->
#   helm install the chart (sessions on, the forge's URLs, CA and token) -> kubectl apply resume Triggers ->
#   two Jobs: issue 7 clones main, starts cold, commits on pi/issue-7, pushes and opens PR 8 with gh; a
#   comment on PR 8 clones its head, resumes the conversation and pushes a second commit. The commit log
#   of pi/issue-7 is shown after each.
# Job Pods run `pidispatch runner` with the real pi 0.73.1 (in the job image on a real node, `make pi`
# otherwise), talking to a scripted OpenAI-compatible model on this machine (no LLM provider is reachable from here); everything else (CRDs,
# operator, RBAC, PVCs, staging, promotion) is the real thing.
# The job goes through the gateway (docs/gateway.md), which holds the forge token and the model key; the job Pod holds
# only its capability. On a real node it is the chart's gateway Pod, behind its Service's address (this cluster has no
# kube-proxy: the demo adds the two DNAT rules kube-proxy would). On the test kubelet, whose Pods are processes on this
# machine's network, `pidispatch gateway` runs here as a process beside the forge and the model (the chart's gateway
# Deployment is scaled to 0 and gateway.url points at this one). The demo shows the Pod's env, the gateway's ledger
# and the Job's tokens.
# The cluster stays up afterwards so you can look around; `make cluster-down` stops it.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"
STATE="${PIDISPATCH_CLUSTER_STATE:-$HOME/.cache/pidispatch/cluster}"
export KUBECONFIG="$STATE/kubeconfig"
BIN="$(.venv/bin/python -c 'from e2e.framework.cluster import bin_dir; print(bin_dir(build=False))')"
export PATH="$BIN:$PATH"
NS=pi-demo
# What runs Pods: a real node (containerd + runc, the images of `make images`) or the test kubelet.
NODE="$(.venv/bin/python -c "import json; print(json.load(open('$STATE/cluster.json')).get('node', 'test'))")"
if [ "$NODE" = real ]; then
    HOST="$(.venv/bin/python -c "from e2e.framework.cluster import Cluster; print(Cluster.load('$STATE').backend.ip)")"
    echo "Pods run in containers on a real node (kubelet + containerd + runc); Pods reach this machine at $HOST"
else
    HOST=127.0.0.1
    echo "Pods run as local processes on the test kubelet (a real node needs root and containerd: see docs/control-plane.md)"
fi

say() { printf '\n\033[1m%s\033[0m\n' "$*"; }
run() { printf '$ %s\n' "$*"; "$@"; }
# Show a manifest on stderr, then apply it. Not `tee /dev/stderr`: tee opens the file behind stderr again, with
# O_TRUNC, so `make demo > demo.log 2>&1` lost everything before the last manifest; `>&2` writes to the open fd.
show_apply() {
    local manifest; manifest="$(cat)"
    printf '%s\n' "$manifest" >&2
    printf '%s\n' "$manifest" | kubectl apply -n "$NS" -f -
}
port() { .venv/bin/python -c 'from e2e.framework.cluster import free_port; print(free_port())'; }

say "0. A fresh namespace on the local control plane"
if kubectl get namespace "$NS" >/dev/null 2>&1; then
    echo "(removing the previous demo: SessionKeys first, while the operator can still forget their transcripts)"
    kubectl delete sessionkeys --all -n "$NS" --timeout=30s >/dev/null 2>&1 || \
        kubectl get sessionkeys -n "$NS" -o name | xargs -r -n1 kubectl patch -n "$NS" --type=merge \
            -p '{"metadata":{"finalizers":null}}' >/dev/null
    helm uninstall pi-dispatch -n "$NS" >/dev/null 2>&1 || true
    kubectl delete namespace "$NS" --wait=true >/dev/null
fi
run kubectl create namespace "$NS"
run kubectl label namespace "$NS" pod-security.kubernetes.io/enforce=restricted

say "0b. A local forge on $HOST (HTTPS with a throwaway CA; git smart HTTP + GitHub Enterprise's API layout)"
DEMO_DIR="$STATE/demo"
for pidfile in "$STATE/demo-model.pid" "$STATE/demo-forge.pid" "$STATE/demo-gateway.pid"; do
    if [ -f "$pidfile" ]; then kill "$(cat "$pidfile")" 2>/dev/null || true; fi
done
rm -rf "$DEMO_DIR" && mkdir -p "$DEMO_DIR/home"
PAT="demo_pat_$(.venv/bin/python -c 'import secrets; print(secrets.token_hex(12))')"
nohup .venv/bin/python -m testkit.forge_server --dir "$DEMO_DIR/forge" --pat "$PAT" --repo octo/repo --host "$HOST" \
    --issue "7=The cache test is flaky" >"$DEMO_DIR/forge.log" 2>&1 &
echo $! > "$STATE/demo-forge.pid"
for _ in $(seq 100); do [ -s "$DEMO_DIR/forge/forge.json" ] && break; sleep 0.1; done
forge() { .venv/bin/python -c "import json,sys; print(json.load(open('$DEMO_DIR/forge/forge.json'))[sys.argv[1]])" "$1"; }
WEB="$(forge web_url)"; API="$(forge api_url)"; CA="$(forge ca)"
REPO_GIT="$DEMO_DIR/forge/repos/octo/repo.git"
echo "forge at $WEB (API $API); octo/repo has one commit on main; issue 7 is open"

say "0c. The scripted model pi will talk to: it drives pi's own bash tool (real git, real gh)"
cat > "$DEMO_DIR/script.json" <<'JSON'
[{"kind": "tool_call", "text": "", "usage": null, "delay": 0, "calls": [{"id": null, "name": "bash", "arguments":
  "{\"command\": \"set -e; echo 'CACHE = {}  # one per test' > cache.py; git commit -qam 'Make the cache per-test'; git push -q; gh pr create --repo \\\"$GH_HOST/octo/repo\\\" --head pi/issue-7 --base main --title 'Fix the flaky cache test' --body 'Fixes #7'\"}"}]},
 {"kind": "reply", "text": "Issue 7: the flaky test races on the cache. I made the cache per-test, pushed pi/issue-7 and opened PR 8."},
 {"kind": "tool_call", "text": "", "usage": null, "delay": 0, "calls": [{"id": null, "name": "bash", "arguments":
  "{\"command\": \"set -e; echo '- the cache is per-test (#7)' > CHANGELOG.md; git add CHANGELOG.md; git commit -qm 'Add a changelog entry'; git push -q\"}"}]},
 {"kind": "reply", "text": "Added a changelog entry for the cache fix I made earlier, pushed to pi/issue-7."}]
JSON
nohup .venv/bin/python -m testkit.scripted_model --host "$HOST" --port-file "$DEMO_DIR/port" --log "$DEMO_DIR/requests.jsonl" \
    --script "$DEMO_DIR/script.json" --agent-dir "$DEMO_DIR/agent" >"$DEMO_DIR/model.log" 2>&1 &
echo $! > "$STATE/demo-model.pid"
for _ in $(seq 50); do [ -s "$DEMO_DIR/port" ] && break; sleep 0.1; done
echo "scripted model on $HOST:$(cat "$DEMO_DIR/port"), pi's agent dir $DEMO_DIR/agent"
# The deployment's models.json (job.modelsConfigMap; the gateway's PI_GATEWAY_MODELS_FILE): the scripted model's
# provider with its key by environment name, FAKE_API_KEY, which only the gateway resolves (job.credentials: a Secret),
# and its prices.
.venv/bin/python - "$DEMO_DIR/agent/models.json" "$DEMO_DIR/models.json" <<'PY'
import json, sys
models = json.load(open(sys.argv[1]))
models["providers"]["fake"]["apiKey"] = "FAKE_API_KEY"
# Its price per million tokens (US dollars): the gateway prices each reply with it, as pi does (docs/gateway.md#cost).
for model in models["providers"]["fake"]["models"]:
    model["cost"] = {"input": 3, "output": 15, "cacheRead": 0.3, "cacheWrite": 3.75}
json.dump(models, open(sys.argv[2], "w"), indent=2)
PY
MODEL_KEY="sk-demo-$(.venv/bin/python -c 'import secrets; print(secrets.token_hex(12))')"
PI_BIN="$ROOT/e2e/pi/node_modules/.bin/pi"

say "1. helm install the chart: the session store, the forge's URLs, its CA, a token Secret"
kubectl apply --server-side --force-conflicts -f charts/pi-dispatch/crds/ >/dev/null
kubectl create secret generic forge-token -n "$NS" --from-literal=token="$PAT" >/dev/null
kubectl create configmap forge-ca -n "$NS" --from-file=ca.crt="$CA" >/dev/null
echo "\$ helm install pi-dispatch charts/pi-dispatch -n $NS --set sessions.enabled=true --set github.authSource=pat \\"
echo "    --set github.token.secretName=forge-token --set github.apiUrl=$API --set github.webUrl=$WEB \\"
echo "    --set github.caBundle.configMap=forge-ca ..."
kubectl create secret generic model-keys -n "$NS" --from-literal=fake="$MODEL_KEY" >/dev/null
kubectl create configmap pi-models -n "$NS" --from-file=models.json="$DEMO_DIR/models.json" >/dev/null
if [ "$NODE" = real ]; then
    # The images `make images` built, imported into the node's containerd. The gateway is the chart's own Pod (the
    # operator's image): installed at 0 replicas first, to learn its Service's address (step 1b starts it there).
    # Job Pods get the model's provider from pi-models and no key: the gateway reads it from model-keys, as it
    # reads the forge token from forge-token.
    echo "    --set image.repository=localhost/pi-dispatch/operator --set image.tag=dev --set image.pullPolicy=Never \\"
    echo "    --set job.image=localhost/pi-dispatch/job:dev --set job.modelsConfigMap=pi-models \\"
    echo "    --set-json 'job.credentials={\"FAKE_API_KEY\":{\"secretName\":\"model-keys\",\"key\":\"fake\"}}' --set gateway.replicas=0"
    images=(--set image.repository=localhost/pi-dispatch/operator --set image.tag=dev --set image.pullPolicy=Never
            --set job.image=localhost/pi-dispatch/job:dev --set job.modelsConfigMap=pi-models
            --set-json 'job.credentials={"FAKE_API_KEY":{"secretName":"model-keys","key":"fake"}}'
            --set gateway.replicas=0)
else
    # The gateway: this machine's process (started below, once the chart made its key and certificate); the chart's
    # Deployment at 0 replicas. Job Pods get the model's provider from pi-models and no key: the gateway reads it
    # from model-keys, as it reads the forge token from forge-token.
    GW_PORT="$(port)"; GW_PROXY="$(port)"; GW_METRICS="$(port)"
    echo "    --set job.modelsConfigMap=pi-models --set-json 'job.credentials={\"FAKE_API_KEY\":{\"secretName\":\"model-keys\",\"key\":\"fake\"}}' \\"
    echo "    --set gateway.replicas=0 --set gateway.url=https://$HOST:$GW_PORT --set gateway.proxyUrl=http://$HOST:$GW_PROXY \\"
    echo "    --set-json 'gateway.extraDNSNames=[\"$HOST\"]'"
    images=(--set metrics.port="$(port)" --set health.port="$(port)" --set job.image=local/job
            --set-json "job.env={\"PI_BIN\":\"$PI_BIN\",\"PI_CODING_AGENT_DIR\":\"$DEMO_DIR/agent\",\"HOME\":\"$DEMO_DIR/home\"}"
            --set job.modelsConfigMap=pi-models
            --set-json 'job.credentials={"FAKE_API_KEY":{"secretName":"model-keys","key":"fake"}}'
            --set gateway.replicas=0 --set gateway.url="https://$HOST:$GW_PORT"
            --set gateway.proxyUrl="http://$HOST:$GW_PROXY" --set-json "gateway.extraDNSNames=[\"$HOST\"]")
fi
helm install pi-dispatch charts/pi-dispatch -n "$NS" --set sessions.enabled=true \
    --set github.authSource=pat --set github.token.secretName=forge-token \
    --set github.apiUrl="$API" --set github.webUrl="$WEB" --set github.caBundle.configMap=forge-ca \
    "${images[@]}" >/dev/null
echo "(installed; waiting for the operator Pod)"
# A condition wait on a selector fails at once while nothing matches: first wait for the ReplicaSet to make the Pod.
kubectl wait -n "$NS" --for=create pod -l app.kubernetes.io/component=operator --timeout=120s >/dev/null
kubectl wait -n "$NS" --for=jsonpath='{.status.phase}'=Running pod -l app.kubernetes.io/component=operator \
    --timeout=120s >/dev/null

if [ "$NODE" = real ]; then
    say "1b. The gateway: the chart's Deployment at one replica, at its Service's address (this cluster has no kube-proxy and no DNS: the demo routes the address to the Pod as kube-proxy would)"
    GW_IP="$(kubectl get service pi-dispatch-gateway -n "$NS" -o jsonpath='{.spec.clusterIP}')"
    run helm upgrade pi-dispatch charts/pi-dispatch -n "$NS" --reuse-values --set gateway.replicas=1 \
        --set gateway.url="https://$GW_IP" --set gateway.proxyUrl="http://$GW_IP:3128" \
        --set-json "gateway.extraDNSNames=[\"$GW_IP\"]" >/dev/null
    kubectl rollout status deployment/pi-dispatch-gateway -n "$NS" --timeout=180s >/dev/null
    kubectl rollout status deployment/pi-dispatch -n "$NS" --timeout=180s >/dev/null  # the operator, told where it is
    GW_POD_IP="$(kubectl get pod -n "$NS" -l app.kubernetes.io/component=gateway -o jsonpath='{.items[0].status.podIP}')"
    .venv/bin/python - "$STATE" "$GW_IP" "$GW_POD_IP" <<'PY'
import sys
from e2e.framework.cluster import Cluster
from pidispatch.contract.gateway_wire import HTTPS_PORT, PROXY_PORT
backend = Cluster.load(sys.argv[1]).backend
backend.route_service(sys.argv[2], 443, sys.argv[3], HTTPS_PORT)
backend.route_service(sys.argv[2], PROXY_PORT, sys.argv[3], PROXY_PORT)
PY
    echo "gateway Pod $GW_POD_IP behind its Service's https://$GW_IP (443 -> 8443) and $GW_IP:3128"
else
    say "1b. The gateway, as a process on this machine: the chart's key and certificate (Secret pi-dispatch-gateway), the forge token and the model key read from their Secrets"
    mkdir -p "$DEMO_DIR/gateway" && chmod 700 "$DEMO_DIR/gateway"
    for key in key tls.crt tls.key; do
        kubectl get secret pi-dispatch-gateway -n "$NS" -o jsonpath="{.data.${key//./\\.}}" | base64 -d \
            > "$DEMO_DIR/gateway/$key"
    done
    env PI_DISPATCH_NAMESPACE="$NS" POD_NAME=demo-gateway PI_GATEWAY_KEY="$DEMO_DIR/gateway/key" \
        PI_GATEWAY_CERT_FILE="$DEMO_DIR/gateway/tls.crt" PI_GATEWAY_KEY_FILE="$DEMO_DIR/gateway/tls.key" \
        PI_GATEWAY_MODELS_FILE="$DEMO_DIR/models.json" PI_GATEWAY_FORGE_CA_FILE="$CA" PI_GATEWAY_PORT="$GW_PORT" \
        PI_GATEWAY_PROXY_PORT="$GW_PROXY" PI_GATEWAY_METRICS_PORT="$GW_METRICS" \
        nohup .venv/bin/pidispatch gateway >"$DEMO_DIR/gateway.log" 2>&1 &
    echo $! > "$STATE/demo-gateway.pid"
    for _ in $(seq 100); do
        .venv/bin/python -c "import urllib.request as u; u.urlopen('http://127.0.0.1:$GW_METRICS/readyz', timeout=1)" \
            2>/dev/null && break
        sleep 0.2
    done
    echo "gateway on https://$HOST:$GW_PORT (proxy $HOST:$GW_PROXY), log $DEMO_DIR/gateway.log"
fi

say "2. Two Triggers that resume on the repositories they name: a label on an issue, and @pi in a comment (note the quoted \"on\": YAML 1.1 reads a bare on: as true)"
show_apply <<YAML
apiVersion: pi-dispatch.dev/v1alpha1
kind: Trigger
metadata: {name: triage}
spec:
  "on": {event: issues.labeled, label: pi, repositories: ["octo/*"]}
  run: {resume: true, piVersion: "0.73.1", model: fake/fake-model}
---
apiVersion: pi-dispatch.dev/v1alpha1
kind: Trigger
metadata: {name: review}
spec:
  "on": {event: issue_comment.created, phrase: "@pi", repositories: ["octo/*"]}
  run: {resume: true, piVersion: "0.73.1", model: fake/fake-model}
YAML
kubectl wait -n "$NS" --for=condition=ResumeArmed trigger/triage trigger/review --timeout=60s >/dev/null
run kubectl get pitriggers -n "$NS"

wait_job() {
    kubectl wait -n "$NS" --for=jsonpath='{.status.phase}'=Succeeded "pijob/$1" --timeout=180s >/dev/null
}
commits() {
    echo "\$ git log --oneline pi/issue-7   (on the forge)"
    git --git-dir "$REPO_GIT" log --format='  %h %s  (%an)' pi/issue-7
}

say "3. Issue 7 is labelled 'pi': the job clones octo/repo at main's tip, starts cold, commits on pi/issue-7, pushes, opens a PR with gh"
show_apply <<YAML >/dev/null
apiVersion: pi-dispatch.dev/v1alpha1
kind: Job
metadata: {name: issue-7-labeled}
spec: {trigger: triage, forge: github, repository: octo/repo, issue: 7, sender: alice}
YAML
wait_job issue-7-labeled
run kubectl get pijob issue-7-labeled -n "$NS" -o jsonpath='{"checkout:  "}{.status.checkout}{"\nworkspace: "}{.status.workspace}{"\n"}'
commits
run kubectl get pijobs,sessionkeys -n "$NS"
say "3b. Through the gateway: the job Pod's env holds no token (its only Secret is its own capability), the gateway's ledger, the Job's tokens"
POD="$(kubectl get pijob issue-7-labeled -n "$NS" -o jsonpath='{.status.podName}')"
UID_="$(kubectl get pijob issue-7-labeled -n "$NS" -o jsonpath='{.metadata.uid}')"
echo "\$ kubectl get pod $POD -n $NS -o jsonpath='{range .spec.containers[0].env[*]}{.name}{\" \"}{.valueFrom.secretKeyRef.name}{\"\\n\"}{end}'"
kubectl get pod "$POD" -n "$NS" \
    -o jsonpath='{range .spec.containers[0].env[*]}{"  "}{.name}{" "}{.valueFrom.secretKeyRef.name}{"\n"}{end}'
spec="$(kubectl get pod "$POD" -n "$NS" -o json)"
echo "the forge token appears $({ grep -o -F -- "$PAT" <<<"$spec" || true; } | wc -l) times in the Pod, the model key $({ grep -o -F -- "$MODEL_KEY" <<<"$spec" || true; } | wc -l) times"
run kubectl get configmap "pi-job-ledger-$UID_" -n "$NS" -o jsonpath='{.data}{"\n"}'
run kubectl get pijob issue-7-labeled -n "$NS" -o jsonpath='{"tokens:  "}{.status.tokens}{"\ngateway: "}{.status.gateway}{"\n"}'

say "4. A review comment on pull request 8 (the agent's, from pi/issue-7): the head comes from the API, same key, so the job resumes"
show_apply <<YAML >/dev/null
apiVersion: pi-dispatch.dev/v1alpha1
kind: Job
metadata: {name: pr-8-comment}
spec:
  trigger: review
  forge: github
  repository: octo/repo
  pullRequest: 8
  sender: bob
  comment: "@pi please also add a changelog entry"
YAML
wait_job pr-8-comment
run kubectl get pijob pr-8-comment -n "$NS" -o jsonpath='{"checkout:  "}{.status.checkout}{"\nsession:   "}{.status.session}{"\n"}'
commits
run kubectl get pijobs,sessionkeys -n "$NS" -o wide
KEY="$(kubectl get sessionkeys -n "$NS" -o jsonpath='{.items[0].metadata.name}')"
echo "\$ kubectl get sessionkey $KEY -n $NS -o jsonpath='{range .status.conditions[*]}...'"
kubectl get sessionkey "$KEY" -n "$NS" \
    -o jsonpath='{range .status.conditions[*]}{"  "}{.type}={.status} ({.reason}): {.message}{"\n"}{end}'

say "4b. What the model received for the follow-up: the first delivery's turn is in it"
.venv/bin/python - "$DEMO_DIR/requests.jsonl" <<'PY'
import json, sys
requests = [json.loads(line) for line in open(sys.argv[1])]
for message in requests[-1]["body"]["messages"]:
    content = message.get("content") or ""
    text = content if isinstance(content, str) else " ".join(part.get("text", "") for part in content)
    for call in message.get("tool_calls") or []:
        text += f" [calls {call['function']['name']}: {call['function']['arguments']}]"
    if message["role"] != "system":
        print(f"  {message['role']:9} {' '.join(text.split())[:110]}")
PY

say "5. The store itself (the PVC's directory on this machine), with the CLI"
STORE="$(.venv/bin/python -c "
from e2e.framework.cluster import Cluster; print(Cluster.load('$STATE').pvc_host_path('$NS', 'pi-dispatch-sessions'))")"
PI_SESSIONS_DIR="$STORE" run .venv/bin/pidispatch store inspect 2>/dev/null

say "Done. Look around with: export KUBECONFIG=$KUBECONFIG; kubectl get pijobs,sessionkeys -n $NS -w"
echo "Stop the control plane with: make cluster-down (the scripted model, the forge and the gateway: kill \$(cat $STATE/demo-model.pid) \$(cat $STATE/demo-forge.pid) \$(cat $STATE/demo-gateway.pid 2>/dev/null))"
