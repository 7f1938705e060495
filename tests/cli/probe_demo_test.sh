#!/usr/bin/env bash
# probe and demo against real processes: demo-server (a provider with no
# idempotency) straight, and behind `effectfence wrap`.
#   probe_demo_test.sh EFFECTFENCE_BINARY SQLITE3
set -uo pipefail
EF=$(realpath "$1")
SQLITE3=$2
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
failures=0
passes=0
pass() { echo "ok: $1"; passes=$((passes + 1)); }
fail() { echo "FAIL: $1" >&2; failures=$((failures + 1)); }
expect() {  # expect DESCRIPTION ACTUAL WANTED
  if [[ "$2" == "$3" ]]; then pass "$1"; else fail "$1: got '$2', want '$3'"; fi
}
charges() { "$SQLITE3" "$1" "SELECT count(*) FROM charges"; }
ARGS='{"order":"o-1","amount_cents":4900}'

# 1. Straight at the provider, 12 concurrent identical calls: 12 effects, proven.
"$EF" probe --tool charge --args "$ARGS" -n 12 --json -- "$EF" demo-server --charges "$WORK/straight.sqlite" \
  >"$WORK/straight.json"
expect "probe proves the double-fire (exit 1)" "$?" 1
expect "12 distinct effects straight" "$(jq .distinct_effects "$WORK/straight.json")" 12
expect "verdict double_fire" "$(jq -r .verdict "$WORK/straight.json")" double_fire
expect "the provider really charged 12 times" "$(charges "$WORK/straight.sqlite")" 12

# 2. The same through wrap: one effect, the rest refused before the provider.
"$EF" probe --tool charge --args "$ARGS" -n 12 --json -- \
  "$EF" wrap --db "$WORK/ledger.sqlite" --wait-secs 0 -- "$EF" demo-server --charges "$WORK/fenced.sqlite" >"$WORK/fenced.json"
expect "probe through wrap proves nothing (exit 0)" "$?" 0
expect "1 distinct effect through wrap" "$(jq .distinct_effects "$WORK/fenced.json")" 1
expect "1 success through wrap" "$(jq .succeeded "$WORK/fenced.json")" 1
expect "11 refused through wrap" "$(jq .tool_errors "$WORK/fenced.json")" 11
expect "the provider charged once" "$(charges "$WORK/fenced.sqlite")" 1

# 2b. The same through wrap as it runs by default: the identical calls wait
#     for the running one (--wait-secs 30) and all get its one charge.
"$EF" probe --tool charge --args "$ARGS" -n 12 --json -- \
  "$EF" wrap --db "$WORK/ledger-wait.sqlite" -- "$EF" demo-server --charges "$WORK/fenced-wait.sqlite" >"$WORK/waited.json"
expect "probe through waiting wrap proves nothing (exit 0)" "$?" 0
expect "1 distinct effect through waiting wrap" "$(jq .distinct_effects "$WORK/waited.json")" 1
expect "12 successes through waiting wrap" "$(jq .succeeded "$WORK/waited.json")" 12
expect "the provider charged once behind waiting wrap" "$(charges "$WORK/fenced-wait.sqlite")" 1

# 3. Sequential retries through wrap (a new wrap process, same ledger): all
#    replayed, identical answers reported as inconclusive, no new charge.
"$EF" probe --tool charge --args "$ARGS" -n 5 --sequential --json -- \
  "$EF" wrap --db "$WORK/ledger.sqlite" -- "$EF" demo-server --charges "$WORK/fenced.sqlite" >"$WORK/seq.json"
expect "sequential probe through wrap exits 0" "$?" 0
expect "5 successes (replays)" "$(jq .succeeded "$WORK/seq.json")" 5
expect "sequential verdict inconclusive, never a proven zero" "$(jq -r .verdict "$WORK/seq.json")" inconclusive
expect "still one charge" "$(charges "$WORK/fenced.sqlite")" 1

# 4. Could not probe: a missing tool, a command that does not exist, bad args.
"$EF" probe --tool refund -n 2 -- "$EF" demo-server --charges "$WORK/x.sqlite" >/dev/null 2>"$WORK/err"
expect "unknown tool exits 2" "$?" 2
grep -q "no tool 'refund'" "$WORK/err" && pass "unknown tool is named" || fail "unknown tool is named"
expect "and nothing was charged" "$(charges "$WORK/x.sqlite")" 0
"$EF" probe --tool charge -n 2 -- /nonexistent/server >/dev/null 2>&1
expect "a command that cannot run exits 2" "$?" 2
"$EF" probe --tool charge --args '{"a":1,"a":2}' -- "$EF" demo-server >/dev/null 2>&1
expect "ambiguous --args exits 2" "$?" 2

# 5. The demo: real counts, both scenes, plain when piped. Its time is
# printed, not judged: a busy 2-core machine is no measure of speed.
start=$(date +%s%N)
"$EF" demo >"$WORK/demo.out" 2>&1
expect "demo exits 0" "$?" 0
echo "info: demo ran in $(( ($(date +%s%N) - start) / 1000000 )) ms"
grep -q "12 charges for one order" "$WORK/demo.out" && pass "demo: 12 charges straight" || fail "demo: 12 charges straight"
grep -q "through effectfence wrap:   1 charge" "$WORK/demo.out" && pass "demo: 1 charge fenced" || fail "demo: 1 charge fenced"
expect "demo: two agents refused as stale_read_set" "$(grep -c 'refused: stale_read_set' "$WORK/demo.out")" 2
expect "demo: one agent acts" "$(grep -c 'acts (seq 1)' "$WORK/demo.out")" 1
expect "demo: each refusal names the seq read and the seq now" \
  "$(grep -c 'you decided at seq 0, it is now at 1' "$WORK/demo.out")" 2
grep -q "12 retries a moment later:  12 replayed ch_1 from the record, 0 ran again" "$WORK/demo.out" \
  && pass "demo: 12 later retries replayed, none ran" || fail "demo: 12 later retries replayed, none ran"
grep -q $'\033\[' "$WORK/demo.out" && fail "demo output piped has no colour codes" || pass "demo output piped has no colour codes"

# The demo's numbers come from the run: the provider's own books, and the ledger.
"$EF" demo --dir "$WORK/demo" >"$WORK/demo2.out" 2>&1
expect "demo --dir exits 0" "$?" 0
expect "the provider's books: 12 charges straight" "$(charges "$WORK/demo/provider-straight.sqlite")" 12
expect "the provider's books: 1 charge through wrap" "$(charges "$WORK/demo/provider-fenced.sqlite")" 1
expect "turf war: exactly one action certified on the cluster" \
  "$("$SQLITE3" "$WORK/demo/ledger.sqlite" "SELECT count(*) FROM certificates WHERE domain = 'cluster:checkout'")" 1
expect "turf war: the two others never admitted" \
  "$("$SQLITE3" "$WORK/demo/ledger.sqlite" "SELECT count(*) FROM intents WHERE domain = 'cluster:checkout'")" 1

# A real npm server that double-fires: every request_planning call mints a new request.
# Straight, the calls are retries (--sequential): concurrent ones race inside the
# server itself (each reloads its file, then numbers the request), so how many
# distinct numbers they get depends on timing.
TASKMANAGER="${EFFECTFENCE_E2E_NODE_MODULES:-$(dirname "$0")/../e2e/node_modules}/@kazuph/mcp-taskmanager/dist/index.js"
if [[ -f "$TASKMANAGER" ]] && command -v node >/dev/null; then
  PLAN='{"originalRequest":"ship the release","tasks":[{"title":"tag","description":"tag v1"}]}'
  TASK_MANAGER_FILE_PATH="$WORK/tasks-straight.json" "$EF" probe --tool request_planning --args "$PLAN" -n 5 \
    --sequential --json -- node "$TASKMANAGER" >"$WORK/tm-straight.json" 2>/dev/null
  expect "probe proves mcp-taskmanager double-fires (exit 1)" "$?" 1
  expect "5 distinct requests straight" "$(jq .distinct_effects "$WORK/tm-straight.json")" 5
  expect "straight, five requests in the task file" "$(jq '.requests | length' "$WORK/tasks-straight.json")" 5
  TASK_MANAGER_FILE_PATH="$WORK/tasks-fenced.json" "$EF" probe --tool request_planning --args "$PLAN" -n 5 \
    --json -- "$EF" wrap --db "$WORK/tm-ledger.sqlite" -- node "$TASKMANAGER" >"$WORK/tm-fenced.json" 2>/dev/null
  expect "through wrap, 1 distinct effect" "$(jq .distinct_effects "$WORK/tm-fenced.json")" 1
  expect "through wrap, one request in the task file" "$(jq '.requests | length' "$WORK/tasks-fenced.json")" 1
else
  fail "@kazuph/mcp-taskmanager is not installed (npm ci --prefix tests/e2e)"
fi

echo "$passes passed, $failures failed"
exit $((failures > 0))
