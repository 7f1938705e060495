#!/usr/bin/env bash
# effectfence scan end to end: the real binary on the fixture repositories
# (each a classic false positive or negative), live against real MCP servers
# from npm, both joined, and the cases where it cannot scan.
#   scan_test.sh EFFECTFENCE_BINARY
set -uo pipefail
EF=$(realpath "$1")
HERE=$(cd "$(dirname "$0")" && pwd)
FIX="$HERE/fixtures"
NM="${EFFECTFENCE_E2E_NODE_MODULES:-$HERE/../e2e/node_modules}"
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
failures=0
passes=0
pass() { echo "ok: $1"; passes=$((passes + 1)); }
fail() { echo "FAIL: $1" >&2; failures=$((failures + 1)); }
expect() {  # expect DESCRIPTION ACTUAL WANTED
  if [[ "$2" == "$3" ]]; then pass "$1"; else fail "$1: got '$2', want '$3'"; fi
}
# tool JSON NAME FILTER: FILTER applied to the named tool of a report.
tool() { jq -c --arg n "$2" ".tools[] | select(.name == \$n) | $3" "$1"; }
scan_json() {  # scan_json OUT ARGS...: runs scan --json, expects exit 0
  local out=$1
  shift
  "$EF" scan --json "$@" >"$out" 2>"$out.err"
  expect "scan $* exits 0" "$?" 0
}

# 1. A read tool declared next to a write tool: not flagged by proximity.
R="$WORK/read_next_to_write.json"
scan_json "$R" "$FIX/read_next_to_write"
expect "mode is source" "$(jq -r .mode "$R")" source
expect "send_payout is a candidate" "$(tool "$R" send_payout .standing)" '"candidate"'
expect "send_payout declared at its line" "$(tool "$R" send_payout '.source | [.file, .line]')" '["src/server.ts",12]'
expect "read_balance is not flagged" "$(tool "$R" read_balance '[.standing, .candidate]')" '["reads",false]'
expect "read_balance has none of its neighbour's effect words" "$(tool "$R" read_balance .effect_words)" '[]'
expect "read_balance keeps its own description" "$(tool "$R" read_balance .source.description)" \
  '"Reads the current balance of an account."'
expect "read_balance gets no wrap line" "$(tool "$R" read_balance .wrap_command)" null
expect "the one write of the tree is found" "$(jq -c '[.writes[] | [.file, .line]]' "$R")" '[["src/server.ts",20]]'
expect "send_payout's wrap line" "$(tool "$R" send_payout .wrap_command)" \
  '"effectfence wrap --only send_payout -- <command that starts this server>"'

# 2. A tool named like a payment that only builds a link: no write in the
#    tree, so not a candidate; tests and node_modules (which do write) are not read.
P="$WORK/payment_link.json"
scan_json "$P" "$FIX/payment_link"
expect "create_payment_link is not a candidate" "$(tool "$P" create_payment_link '[.standing, .candidate]')" \
  '["no_write_in_tree",false]'
expect "its effect words are still shown" "$(tool "$P" create_payment_link '.effect_words | index("payment") != null')" true
expect "no write in the tree (tests and node_modules not read)" "$(jq '.writes | length' "$P")" 0
expect "the guard inside node_modules does not count" "$(jq '.guards | length' "$P")" 0
expect "tests and node_modules are named as not read" "$(jq -c .skipped_dirs "$P")" '["node_modules","tests"]'
expect "and the text report names them too" \
  "$("$EF" scan "$FIX/payment_link" | grep -c '^  not read: 2 dependency, build, test or example directories: node_modules, tests$')" 1
expect "no candidates at all" "$(jq '[.tools[] | select(.candidate)] | length' "$P")" 0
expect "get_order_status reads" "$(tool "$P" get_order_status .standing)" '"reads"'

# 3. A camelCase guard (deriveIdempotencyKey) is found.
C="$WORK/camel_guard.json"
scan_json "$C" "$FIX/camel_guard"
expect "deriveIdempotencyKey is found in code" "$(jq -c '[.guards[].what] | unique' "$C")" '["deriveIdempotencyKey"]'
expect "the guard lines" "$(jq -c '[.guards[].line]' "$C")" '[18,28]'
expect "create_order: still a lead, with the guard seen" "$(tool "$C" create_order '[.standing, .guard_seen]')" \
  '["candidate",true]'
expect "the Go write is found" "$(jq -c '[.writes[] | .what | startswith("http POST")]' "$C")" '[true]'

# 4. Guards named only in strings and comments do not count.
G="$WORK/guard_in_string.json"
scan_json "$G" "$FIX/guard_in_string"
expect "no guard counted from strings or comments" "$(jq '.guards | length' "$G")" 0
expect "send_invoice: a lead without a guard" "$(tool "$G" send_invoice '[.standing, .guard_seen]')" '["candidate",false]'
expect "its write is inside its own declaration" "$(tool "$G" send_invoice '[.source.own_writes[].line]')" '[14]'

# 5. A retry loop around a POST.
T="$WORK/retry_post.json"
scan_json "$T" "$FIX/retry_post"
expect "one retry around a write" "$(jq '.retries_around_writes | length' "$T")" 1
expect "the loop and the POST it retries" \
  "$(jq -c '.retries_around_writes[0] | [.retry.line, .retry.what, .write.line, (.write.what | startswith("http POST"))]' "$T")" \
  '[13,"loop",15,true]'
expect "transfer is a candidate with the retry in its evidence" \
  "$(tool "$T" transfer '[.standing, (.evidence | map(select(startswith("retry (loop)"))) | length)]')" '["candidate",1]'
expect "list_transfers reads" "$(tool "$T" list_transfers .standing)" '"reads"'

# 6. The text report: evidence, checks, the wrap line, and what it cannot see.
"$EF" scan "$FIX/retry_post" >"$WORK/text.out" 2>&1
expect "text mode exits 0" "$?" 0
for want in "not verdicts" "evidence:" "check by hand:" "effectfence wrap --only transfer --" "What this scan cannot see:"; do
  grep -qF -- "$want" "$WORK/text.out" && pass "text report has '$want'" || fail "text report has '$want'"
done

# 7. Live: the real filesystem server (annotated) and mcp-taskmanager (not annotated).
FILESYSTEM="$NM/@modelcontextprotocol/server-filesystem/dist/index.js"
TASKMANAGER="$NM/@kazuph/mcp-taskmanager/dist/index.js"
if [[ -f "$FILESYSTEM" && -f "$TASKMANAGER" ]] && command -v node >/dev/null; then
  mkdir -p "$WORK/allowed"
  F="$WORK/filesystem.json"
  scan_json "$F" -- node "$FILESYSTEM" "$WORK/allowed"
  expect "live mode" "$(jq -r .mode "$F")" live
  expect "edit_file: declared non-idempotent, fenced by wrap, a candidate" \
    "$(tool "$F" edit_file '[.live.declared, .live.wrap_default, .standing]')" \
    '["non_idempotent_or_destructive","fenced","candidate"]'
  expect "read_file: declared read-only, passed through by wrap, not a candidate" \
    "$(tool "$F" read_file '[.live.declared, .live.wrap_default, .candidate]')" '["read_only","passed_through",false]'
  expect "write_file: declared idempotent, still fenced by wrap" \
    "$(tool "$F" write_file '[.live.declared, .live.wrap_default]')" '["idempotent","fenced"]'
  expect "edit_file's wrap line names the server" "$(tool "$F" edit_file .wrap_command)" \
    "\"effectfence wrap --only edit_file -- node $FILESYSTEM $WORK/allowed\""
  "$EF" scan -- node "$FILESYSTEM" "$WORK/allowed" >"$WORK/fs.txt" 2>&1
  grep -q "passes through (declared read-only): .*read_file" "$WORK/fs.txt" && grep -q "by default fences: .*edit_file" "$WORK/fs.txt" \
    && pass "the text report says what wrap fences and passes through" \
    || fail "the text report says what wrap fences and passes through"
  expect "scanning wrote nothing in the allowed directory" "$(ls -A "$WORK/allowed" | wc -l)" 0

  K="$WORK/taskmanager.json"
  TASK_MANAGER_FILE_PATH="$WORK/tasks.json" scan_json "$K" -- node "$TASKMANAGER"
  expect "mcp-taskmanager: every tool undeclared" "$(jq -c '[.tools[].live.declared] | unique' "$K")" '["undeclared"]'
  expect "mcp-taskmanager: wrap fences every tool" "$(jq -c '[.tools[].live.wrap_default] | unique' "$K")" '["fenced"]'
  expect "delete_task is a candidate" "$(tool "$K" delete_task .standing)" '"candidate"'
  expect "list_requests says it reads" "$(tool "$K" list_requests .standing)" '"reads"'
  [[ ! -e "$WORK/tasks.json" ]] && pass "no tool was called (no task file)" || fail "no tool was called (no task file)"
else
  fail "the npm servers are not installed (npm ci --prefix tests/e2e)"
fi

# 8. Both: source and the running server joined by tool name (the SDK
#    fixture server, which pages its tools/list).
E2E_FIX="$HERE/../e2e/fixtures"
if [[ -d "$NM/@modelcontextprotocol/sdk" ]] && command -v node >/dev/null; then
  B="$WORK/both.json"
  EFFECT_LOG="$WORK/effects.jsonl" scan_json "$B" "$E2E_FIX" -- node "$E2E_FIX/effect_server.mjs"
  expect "mode both" "$(jq -r .mode "$B")" both
  [[ ! -s "$WORK/effects.jsonl" ]] && pass "no tool of the fixture was called, read tools included (its event log is empty)" \
    || fail "no tool of the fixture was called: $(cat "$WORK/effects.jsonl")"
  expect "effect: its declaration and its annotations side by side" \
    "$(tool "$B" effect '[.source.file, .live.declared, .standing]')" \
    '["effect_server.mjs","non_idempotent_or_destructive","candidate"]'
  expect "every served tool was found in the source" "$(jq '[.tools[] | select(.source == null)] | length' "$B")" 0
  expect "every declared tool was served (all pages read)" "$(jq '[.tools[] | select(.live == null)] | length' "$B")" 0
else
  fail "@modelcontextprotocol/sdk is not installed (npm ci --prefix tests/e2e)"
fi

# 9. Could not scan: exit 2 with a named error.
"$EF" scan "$WORK/no/such/dir" >/dev/null 2>"$WORK/err"
expect "a missing path exits 2" "$?" 2
grep -q "reading the source: no such file or directory" "$WORK/err" && pass "the missing path is named" \
  || fail "the missing path is named"
"$EF" scan -- /nonexistent/server >/dev/null 2>"$WORK/err"
expect "a server that cannot start exits 2" "$?" 2
grep -q "starting the server: cannot run '/nonexistent/server'" "$WORK/err" && pass "the server's failure is named" \
  || fail "the server's failure is named"
"$EF" scan "$FIX/payment_link" -- false >/dev/null 2>"$WORK/err"
expect "a server that exits at once exits 2, even with a good path" "$?" 2
"$EF" scan >/dev/null 2>&1
expect "no path and no server exits 2" "$?" 2
"$EF" scan --frobnicate "$FIX/payment_link" >/dev/null 2>&1
expect "an unknown option exits 2" "$?" 2

echo "$passes passed, $failures failed"
((failures == 0))
