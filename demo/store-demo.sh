#!/usr/bin/env bash
# A walk through the session store with the pidispatch CLI: two deliveries on one branch, the
# second resumes the first's transcript; then a pi upgrade and a corrupted file start cold, each
# with its reason. Everything happens in a temporary directory that is removed at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
PD=".venv/bin/pidispatch"
# Real pi session files, committed by `make transcripts` for the pinned pi (tests/data/transcripts/pi-<version>).
SAMPLES="${PIDISPATCH_SAMPLES:-$(.venv/bin/python -c 'from testkit.gen_transcripts import samples_dir; print(samples_dir())')}"
# pi's own context figure for the resumed transcript (get_session_stats, recorded beside the files)
context="$(.venv/bin/python -c 'import json, sys; print(json.load(open(sys.argv[1]))["files"][sys.argv[2]]["tokens"])' \
  "$SAMPLES/context.json" s1_after_turn2.jsonl)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
export PI_SESSIONS_DIR="$work/store"
mkdir -m 0700 "$PI_SESSIONS_DIR"

say() { printf '\n\033[1m%s\033[0m\n' "$*"; }
run() { printf '$ %s\n' "$*"; "$@" 2>/dev/null; }

say "1. The key of issue 7 in octo/repo (the PR from pi/issue-7 gets the same one):"
printf '$ %s\n' "$PD key --forge github --repo octo/repo --issue 7"
key="$($PD key --forge github --repo octo/repo --issue 7)"; echo "$key"
run $PD key --forge github --repo octo/repo --branch pi/issue-7

say "2. First delivery: nothing stored yet, so the job starts cold with a 0-byte file."
run $PD store resolve --key "$key" --stage "$work/job1" --pi-version 0.73.1
say "   ... pi runs and writes its transcript (a real pi 0.73.1 file stands in) ..."
cp "$SAMPLES/s1_after_turn1.jsonl" "$work/job1/current.jsonl"
run $PD store promote --key "$key" --stage "$work/job1" --host-resume false --pi-version 0.73.1 --model fake/fake-model

say "3. Second delivery (a review comment on the PR): the transcript is staged, the job resumes."
run $PD store resolve --key "$key" --stage "$work/job2" --pi-version 0.73.1
cmp "$work/job2/current.jsonl" "$SAMPLES/s1_after_turn1.jsonl" && echo "(staged copy is byte-identical to the stored transcript)"
cp "$SAMPLES/s1_after_turn2.jsonl" "$work/job2/current.jsonl"
run $PD store promote --key "$key" --stage "$work/job2" --host-resume true --pi-version 0.73.1 --model fake/fake-model --context "$context 32000"

say "4. What the store holds now:"
run $PD store inspect --pi-version 0.73.1

say "5. The job image moves to another pi: the stored transcript is not handed to it."
run $PD store resolve --key "$key" --stage "$work/job3" --pi-version 0.74.0

say "6. A damaged transcript on disk is never resumed:"
printf 'not json\n' > "$PI_SESSIONS_DIR/$key/current.jsonl"
run $PD store resolve --key "$key" --stage "$work/job4" --pi-version 0.73.1
run $PD transcript check "$SAMPLES/edge/d_torn_last.before.jsonl" || true

say "Done. (The operator demo on the local control plane, with real pi, arrives with the runner work.)"
