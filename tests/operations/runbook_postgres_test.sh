#!/usr/bin/env bash
# Runs every block of docs/OPERATIONS.md marked "<!-- runbook-test-postgres:
# NAME -->" with the real psql / effectfence binary against a PostgreSQL
# ledger the fence wrote (a fresh schema in the database
# $EFFECTFENCE_TEST_LEDGER names), in the order of the page, and checks what
# each one did. A ```psql block without a marker, a marked block without a
# check, or a check without a block fails the test.
#
# usage: runbook_postgres_test.sh EFFECTFENCE OPS_LEDGER_FIXTURE PSQL OPERATIONS.md
set -uo pipefail

EF=$(realpath "$1")
FIXTURE=$(realpath "$2")
PSQL=$3  # not resolved: Debian's psql is a wrapper that reads its own name
DOC=$4
source "$(dirname "$0")/lib.sh"
command -v jq >/dev/null || { echo "FAIL: jq is needed to read effectfence's JSON output" >&2; exit 1; }
SERVER=${EFFECTFENCE_TEST_LEDGER:?names the PostgreSQL database to test against}

SCHEMA=runbook_$$_$RANDOM
"$PSQL" -X -q "$SERVER" -c "CREATE SCHEMA $SCHEMA" || { echo "FAIL: cannot create a schema" >&2; exit 1; }
if [[ $SERVER == *\?* ]]; then LEDGER="$SERVER&"; else LEDGER="$SERVER?"; fi
LEDGER+="options=-csearch_path%3D$SCHEMA"
drop_schema() { "$PSQL" -X -q "$SERVER" -c "DROP SCHEMA $SCHEMA CASCADE" >/dev/null 2>&1; }
trap 'rc=$?; drop_schema; (exit $rc); cleanup' EXIT
# psql in the shape of sqlite3's list mode: unaligned, '|' between fields, no header.
pq() { "$PSQL" -X -q -A -t -F '|' "$LEDGER" "$@"; }
q() { pq -c "$1"; }
SHELL_TOOL=$PSQL
MARKER=runbook-test-postgres
QUERY_LANG=psql
run_query_block() { pq -f "$1"; }
ledger_q() { q "$1"; }
source "$(dirname "$0")/runbook_lib.sh"

# Every row of every table, as text: any change at all changes this.
fingerprint() {
  local t args=()
  for t in intents domains certificates events counters clears; do args+=(-c "SELECT * FROM $t ORDER BY 1"); done
  pq "${args[@]}" | sha256sum | cut -c1-64
}

expect_refused() {  # NAME MESSAGE (psql reports a failed statement and goes on: the exit status says nothing)
  expect_match "$ERR" "ERROR:  $2" "$1 fails with the trigger's message"
  expect_eq "$(fingerprint)" "$BEFORE" "$1 changes nothing in the ledger"
}

check_in_flight() {
  expect_success "in-flight"
  expect_eq "$(wc -l <<<"$OUT")" 1 "in-flight lists one intent"
  expect_match "$OUT" "^payout:batch-9\|payout\|treasury-agent\|[^|]+:${session_pid}\|" "in-flight names the live holder"
}

check_order_123() {
  expect_success "order-123"
  local charge receipt
  charge=$(cert_of "charge:order-123")
  receipt=$(cert_of "receipt:order-123")
  expect_match "$charge" '^[0-9a-f]{64}$' "order 123 has a charge certificate"
  expect_match "$OUT" "^[0-9-]+ [0-9:.]+\|charge:order-123\|charge\|\{\"charge_id\":\"ch_123\",\"status\":\"succeeded\"\}\|$charge$" \
    "order-123 shows the charge, its result and its certificate"
  expect_match "$OUT" "\|receipt:order-123\|send_receipt\|.*\|$receipt$" "order-123 shows the receipt"
  expect_eq "$(count_matches "$OUT" '\|(admitted|committed)\|(charge|receipt):order-123\|')" 4 \
    "order-123 lists every attempt on the order"
  expect_no_match "$OUT" "order-12[4-9]" "order-123 shows nothing of other orders"
}

check_clear() {
  expect_success "clear"
  expect_eq "$(state_of charge:order-124)" "cleared" "clear moves the intent to cleared"
  expect_eq "$(q "SELECT actor || '|' || (detail::json ->> 'reason') || '|' || (detail::json ->> 'previous_state') FROM events WHERE kind = 'cleared' AND intent = 'charge:order-124'")" \
    "alice|provider dashboard shows no charge for order 124|failed" "clear writes who, why and what it was to the event log"
  expect_eq "$(q "SELECT previous_state FROM clears WHERE intent = 'charge:order-124'")" "failed" \
    "clear records the previous state"
}

check_clear_confirm() {
  expect_success "clear-confirm"
  expect_match "$OUT" '^charge:order-124\|cleared\|provider dashboard shows no charge for order 124$' "clear-confirm shows the state"
  expect_match "$OUT" '\|charge:order-124\|alice\|provider dashboard shows no charge for order 124\|failed$' "clear-confirm shows the clear"
  expect_match "$OUT" '\|cleared\|alice\|\{.*"previous_state" ?: ?"failed"' "clear-confirm shows the event"
  expect_eq "$(session prepare charge:order-124)" "admitted" "the live fence admits the cleared intent afresh"
  expect_match "$(session commit charge:order-124)" "^committed [0-9a-f]{64}$" "the fresh attempt commits"
}

check_cli_clear() {
  expect_success "cli-clear"
  expect_match "$OUT" "^charge:order-125  \[unknown since " "cli-clear: fenced lists the intent first"
  expect_match "$OUT" "^cleared charge:order-125 \(was unknown\) by bob: provider API" "cli-clear: clear reports it"
  expect_eq "$(state_of charge:order-125)" "cleared" "cli-clear clears the intent"
  expect_eq "$(q "SELECT actor FROM events WHERE kind = 'cleared' AND intent = 'charge:order-125'")" "bob" \
    "cli-clear records the operator"
}

check_audit_is_append_only() {
  expect_eq "$(count_matches "$ERR" 'ERROR:  effectfence: the event log is append-only')" 3 "UPDATE, DELETE and TRUNCATE on events are refused"
  expect_eq "$(count_matches "$ERR" 'ERROR:  effectfence: certificates are immutable')" 3 "UPDATE, DELETE and TRUNCATE on certificates are refused"
  expect_eq "$(count_matches "$ERR" 'ERROR:  effectfence: clears are an audit record')" 2 "UPDATE and DELETE on clears are refused"
  expect_eq "$(fingerprint)" "$BEFORE" "audit-is-append-only changes nothing"
}

check_triggers() {
  expect_success "triggers"
  expect_eq "$(tr '\n' ' ' <<<"$OUT")" \
    "certificates_immutable|certificates certificates_immutable_truncate|certificates clears_append_only_delete|clears clears_append_only_truncate|clears clears_append_only_update|clears clears_apply|clears clears_check|clears domains_evicted_with_event|domains domains_not_truncated|domains domains_sequence_kept|domains events_append_only|events events_append_only_truncate|events intents_cleared_through_clears|intents intents_done_kept|intents intents_done_with_certificate|intents intents_follow_state_machine|intents intents_holder_kept|intents intents_in_flight_fenced_with_event|intents intents_not_truncated|intents intents_renamed_never|intents intents_results_kept|intents intents_unfinished_kept|intents " \
    "triggers lists every protection"
}

check_last_hour() {
  expect_success "last-hour"
  expect_match "$OUT" '\|cleared\|charge:order-124\|alice\|provider dashboard' "last-hour shows the clear"
  expect_match "$OUT" "\|charge:order-123\|charge\|$(cert_of charge:order-123)$" "last-hour shows recent effects"
  expect_no_match "$OUT" 'order-10[0-4]' "last-hour leaves out what happened two days ago"
  local summed expected
  summed=$(grep -E '^[a-z_]+\|[0-9]+$' <<<"$OUT" | awk -F'|' '{ n += $2 } END { print n + 0 }')
  expected=$(q "SELECT count(*) FROM events WHERE at >= effectfence_now_ms() - 3600 * 1000")
  expect_eq "$summed" "$expected" "last-hour's summary counts every recent event"
}

check_size() {
  expect_success "size"
  local stats
  stats=$("$EF" stats --db "$LEDGER" --json)
  expect_match "$OUT" "^certificates\|$(jq .certificates <<<"$stats")$" "size counts certificates"
  expect_match "$OUT" "^events\|$(jq .events <<<"$stats")$" "size counts events"
  expect_match "$OUT" "^done\|$(jq .intents.done <<<"$stats")$" "size counts intents by state"
  expect_match "$OUT" '^[0-9]+ (bytes|kB|MB)$' "size shows the ledger's size"
}

before_sweep() {
  expect_eq "$(q "SELECT count(*) FROM intents WHERE intent IN ($OLD_INTENTS)")" 6 "two-day-old intents exist before the sweep"
  CERTIFICATES_BEFORE=$(q "SELECT count(*) FROM certificates")
  # The sweep goes by the ledger's TTL, which a server records before its
  # first sweep (the default, a day); no server swept this fixture.
  q "UPDATE retention SET value = 86400 * 1000 WHERE name = 'result_ttl_ms'" >/dev/null
}

check_sweep() {
  expect_success "sweep"
  expect_eq "$(q "SELECT count(*) FROM intents WHERE intent IN ($OLD_INTENTS)")" 0 "sweep removes intents done before the cutoff"
  expect_eq "$(state_of charge:order-123)" "done" "sweep keeps recent results"
  expect_eq "$(q "SELECT count(*) FROM certificates")" "$CERTIFICATES_BEFORE" "sweep keeps every certificate"
  expect_eq "$(q "SELECT actor || '|' || (detail::json ->> 'intents') FROM events WHERE kind = 'swept'")" "alice|6" \
    "sweep records what it removed"
}

check_export_verify() {
  expect_eq "$RC" 0 "export-verify runs"
  expect_eq "$(grep -Ev '^effectfence export: wrote [0-9]+ certificate\(s\) and [0-9]+ event\(s\) to ' <<<"$ERR")" "" \
    "export-verify prints no error"
  expect_eq "$(jq -c 'select(.type == "certificate")' "$RUN/audit.jsonl" | wc -l)" \
    "$(q "SELECT count(*) FROM certificates")" "export-verify: the dump has every certificate"
  expect_eq "$(jq -c 'select(.type == "event")' "$RUN/audit.jsonl" | wc -l)" \
    "$(q "SELECT count(*) FROM events")" "export-verify: the dump has every event"
  expect_match "$OUT" '^export audit.jsonl: [0-9]+ certificate' "export-verify: verify checked the dump"
  expect_match "$OUT" 'every hash, body and parent link checks out' "export-verify: verify checked the ledger"
  expect_match "$OUT" '^ledger +postgresql://' "export-verify: stats names the ledger by its URL"
}

EXPECTED="what-is-fenced.psql in-flight.psql intent-history.psql order-123.psql clear.psql clear-confirm.psql \
clear-refused-done.psql clear-refused-in-flight.psql clear-refused-unknown.psql clear-by-hand-refused.psql cli-clear.sh \
audit-is-append-only.psql triggers.psql last-hour.psql domain-sequences.psql counters.psql size.psql sweep.psql \
export-verify.sh metrics.sh"

"$FIXTURE" populate "$LEDGER" || { fail "could not write the ledger"; finish; exit 1; }
start_session
expect_eq "$(session prepare payout:batch-9)" "admitted" "the live fence holds a payout in flight"

run_runbook "$EXPECTED" "PostgreSQL runbook" || { finish; exit 1; }

# The cluster trusts local connections, so a password in the URL is accepted;
# no operator command may print it.
SECRET=pw-shown-to-nobody
WITH_PASSWORD=${LEDGER/:\/\/effectfence@/:\/\/effectfence:$SECRET@}
expect_match "$WITH_PASSWORD" "effectfence:$SECRET@" "a URL with a password"
shown=$(cd "$RUN" && "$EF" stats --db "$WITH_PASSWORD" 2>&1; "$EF" fenced --db "$WITH_PASSWORD" --json 2>&1
        "$EF" verify --db "$WITH_PASSWORD" 2>&1; "$EF" export --db "$WITH_PASSWORD" 2>&1 | head -1
        "$EF" clear --db "$WITH_PASSWORD" charge:order-999 --reason typo 2>&1)
expect_match "$shown" "effectfence:\*\*\*@" "operator commands name the ledger with its password scrubbed"
expect_no_match "$shown" "$SECRET" "operator commands never print the password"

expect_match "$(session commit payout:batch-9)" "^committed [0-9a-f]{64}$" "the payout held through all of this commits"
echo quit >&"${SESSION[1]}"
wait "$session_pid"
expect_eq "$?" 0 "the live fence exits cleanly"
finish
