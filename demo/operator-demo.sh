#!/usr/bin/env bash
# The operator's main job, end to end, on the local control plane (kube-apiserver + etcd +
# kube-controller-manager + the test kubelet, started by `make cluster-up`):
#   helm install the chart (sessions on) -> kubectl apply a resume Trigger -> two Jobs on one issue:
#   the first starts cold and its transcript is promoted, the second resumes it.
# Job Pods run `pidispatch runner` with the real pi 0.73.1 (`make pi`), talking to a scripted
# OpenAI-compatible model on 127.0.0.1 (no LLM provider is reachable from here); everything else (CRDs,
# operator, RBAC, PVCs, staging, promotion) is the real thing.
# The cluster stays up afterwards so you can look around; `make cluster-down` stops it.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"
STATE="${PIDISPATCH_CLUSTER_STATE:-$HOME/.cache/pidispatch/cluster}"
export KUBECONFIG="$STATE/kubeconfig"
BIN="$(.venv/bin/python -c 'from e2e.cluster import bin_dir; print(bin_dir(build=False))')"
export PATH="$BIN:$PATH"
NS=pi-demo

say() { printf '\n\033[1m%s\033[0m\n' "$*"; }
run() { printf '$ %s\n' "$*"; "$@"; }
port() { .venv/bin/python -c 'from e2e.cluster import free_port; print(free_port())'; }

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

say "0b. The scripted model pi will talk to (an OpenAI-compatible server on 127.0.0.1)"
DEMO_DIR="$STATE/demo"
rm -rf "$DEMO_DIR" && mkdir -p "$DEMO_DIR/home"
if [ -f "$STATE/demo-model.pid" ]; then kill "$(cat "$STATE/demo-model.pid")" 2>/dev/null || true; fi
cat > "$DEMO_DIR/script.json" <<'JSON'
[{"kind": "reply", "text": "Issue 7: the flaky test races on the cache. I made the cache per-test, pushed pi/issue-7 and opened PR 12."},
 {"kind": "reply", "text": "Added a changelog entry for the cache fix I made earlier, pushed to pi/issue-7."}]
JSON
nohup .venv/bin/python -m e2e.scripted_model --port-file "$DEMO_DIR/port" --log "$DEMO_DIR/requests.jsonl" \
    --script "$DEMO_DIR/script.json" --agent-dir "$DEMO_DIR/agent" >"$DEMO_DIR/model.log" 2>&1 &
echo $! > "$STATE/demo-model.pid"
for _ in $(seq 50); do [ -s "$DEMO_DIR/port" ] && break; sleep 0.1; done
echo "scripted model on 127.0.0.1:$(cat "$DEMO_DIR/port"), pi's agent dir $DEMO_DIR/agent"
PI_BIN="$ROOT/e2e/pi/node_modules/.bin/pi"

say "1. helm install the chart with the session store enabled"
# Helm installs crds/ only when absent and never upgrades them; apply them first, as an upgrade would.
kubectl apply --server-side --force-conflicts -f charts/pi-dispatch/crds/ >/dev/null
echo "\$ helm install pi-dispatch charts/pi-dispatch -n $NS --set sessions.enabled=true --set github.authSource=app ..."
helm install pi-dispatch charts/pi-dispatch -n "$NS" --set sessions.enabled=true \
    --set github.authSource=app --set metrics.port="$(port)" --set health.port="$(port)" \
    --set job.image=local/job --set-json "job.env={\"PI_BIN\":\"$PI_BIN\",\"PI_CODING_AGENT_DIR\":\"$DEMO_DIR/agent\",\"HOME\":\"$DEMO_DIR/home\"}" >/dev/null
echo "(installed; waiting for the operator Pod)"
kubectl wait -n "$NS" --for=jsonpath='{.status.phase}'=Running pod -l app.kubernetes.io/component=operator \
    --timeout=120s >/dev/null

say "2. Two Triggers that resume: a label on an issue, and @pi in a comment (note the quoted \"on\": YAML 1.1 reads a bare on: as true)"
cat <<YAML | tee /dev/stderr | kubectl apply -n "$NS" -f -
apiVersion: pi-dispatch.dev/v1alpha1
kind: Trigger
metadata: {name: triage}
spec:
  "on": {event: issues.labeled, label: pi}
  run: {resume: true, piVersion: "0.73.1", model: fake/fake-model}
---
apiVersion: pi-dispatch.dev/v1alpha1
kind: Trigger
metadata: {name: review}
spec:
  "on": {event: issue_comment.created, phrase: "@pi"}
  run: {resume: true, piVersion: "0.73.1", model: fake/fake-model}
YAML
kubectl wait -n "$NS" --for=condition=ResumeArmed trigger/triage trigger/review --timeout=60s >/dev/null
run kubectl get pitriggers -n "$NS"

wait_job() {
    kubectl wait -n "$NS" --for=jsonpath='{.status.phase}'=Succeeded "pijob/$1" --timeout=120s >/dev/null
}

say "3. Issue 7 is labelled 'pi': nothing is stored for pi/issue-7 yet, so the job starts cold; its transcript is promoted"
cat <<YAML | tee /dev/stderr | kubectl apply -n "$NS" -f - >/dev/null
apiVersion: pi-dispatch.dev/v1alpha1
kind: Job
metadata: {name: issue-7-labeled}
spec: {trigger: triage, forge: github, repository: octo/repo, issue: 7, sender: alice}
YAML
wait_job issue-7-labeled
run kubectl get pijobs,sessionkeys -n "$NS"

say "4. A review comment on pull request 12, opened by the agent from pi/issue-7: same key, so the job resumes"
echo "(the PR's head would come from the GitHub API; without one here, the Job carries it as resolved fields)"
cat <<YAML | tee /dev/stderr | kubectl apply -n "$NS" -f - >/dev/null
apiVersion: pi-dispatch.dev/v1alpha1
kind: Job
metadata: {name: pr-12-comment}
spec:
  trigger: review
  forge: github
  repository: octo/repo
  pullRequest: 12
  sender: bob
  comment: "@pi please also add a changelog entry"
  resolved: {headRef: pi/issue-7, headRepository: octo/repo}
YAML
wait_job pr-12-comment
run kubectl get pijobs,sessionkeys -n "$NS" -o wide
run kubectl get pijob pr-12-comment -n "$NS" -o jsonpath='{.status.session}{"\n"}'
KEY="$(kubectl get sessionkeys -n "$NS" -o jsonpath='{.items[0].metadata.name}')"
echo "\$ kubectl get sessionkey $KEY -n $NS -o jsonpath='{range .status.conditions[*]}...'"
kubectl get sessionkey "$KEY" -n "$NS" \
    -o jsonpath='{range .status.conditions[*]}{"  "}{.type}={.status} ({.reason}): {.message}{"\n"}{end}'

say "4b. What the model received for the follow-up: the first delivery's turn is in it"
.venv/bin/python - "$DEMO_DIR/requests.jsonl" <<'PY'
import json, sys
requests = [json.loads(line) for line in open(sys.argv[1])]
for message in requests[-1]["body"]["messages"]:
    content = message["content"]
    text = content if isinstance(content, str) else " ".join(part.get("text", "") for part in content)
    if message["role"] != "system":
        print(f"  {message['role']:9} {' '.join(text.split())[:110]}")
PY

say "5. The store itself (the PVC's directory on this machine), with the CLI"
STORE="$(.venv/bin/python -c "
from e2e.cluster import Cluster; print(Cluster.load('$STATE').pvc_host_path('$NS', 'pi-dispatch-sessions'))")"
PI_SESSIONS_DIR="$STORE" run .venv/bin/pidispatch store inspect 2>/dev/null

say "Done. Look around with: export KUBECONFIG=$KUBECONFIG; kubectl get pijobs,sessionkeys -n $NS -w"
echo "Stop the control plane with: make cluster-down (the scripted model: kill \$(cat $STATE/demo-model.pid))"
