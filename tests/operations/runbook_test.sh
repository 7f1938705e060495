#!/usr/bin/env bash
# Runs every ```sql block of docs/OPERATIONS.md (and every ```sh block marked
# for it) with the real sqlite3 shell / effectfence binary against a ledger the
# fence wrote, in the order of the page, and checks what each one did.
#
# Blocks are taken from the page mechanically: each is preceded by
# "<!-- runbook-test: NAME -->" and checked by check_NAME below (dashes become
# underscores). A ```sql block without a marker, a marked block without a
# check, or a check without a block fails the test, so the page and this test
# cannot drift apart.
#
# usage: runbook_test.sh EFFECTFENCE OPS_LEDGER_FIXTURE SQLITE3 OPERATIONS.md
set -uo pipefail

EF=$(realpath "$1")
FIXTURE=$(realpath "$2")
SQLITE3=$(realpath "$3")
DOC=$4
source "$(dirname "$0")/lib.sh"
command -v jq >/dev/null || { echo "FAIL: jq is needed to read effectfence's JSON output" >&2; exit 1; }

LEDGER=$WORK/ledger.sqlite
SHELL_TOOL=$SQLITE3
MARKER=runbook-test
QUERY_LANG=sql
# No -bail: a block of statements that must each fail is run whole.
run_query_block() { "$SQLITE3" -batch "$LEDGER" <"$1"; }
ledger_q() { q "$LEDGER" "$1"; }
source "$(dirname "$0")/runbook_lib.sh"

# The whole ledger, as text: any change at all changes this.
fingerprint() {
  "$SQLITE3" -batch "$LEDGER" ".timeout 5000" ".dump" | sha256sum | cut -c1-64
}

expect_refused() {  # NAME MESSAGE
  CHECKS=$((CHECKS + 1))
  if [[ $RC -ne 0 ]]; then pass "$1 fails"; else fail "$1 should fail"; fi
  expect_match "$ERR" "$2" "$1 fails with the trigger's message"
  expect_eq "$(fingerprint)" "$BEFORE" "$1 changes nothing in the ledger"
}

# --- checks, one per block ----------------------------------------------------

check_session_settings() {
  expect_success "session-settings"
  # The settings must do what the page says: boxed output with headers.
  local boxed
  boxed=$( (cat "$BLOCKS/session-settings.sql"; echo "SELECT count(*) AS n FROM intents;") |
    "$SQLITE3" -batch "$LEDGER")
  expect_match "$boxed" "^│ n +│$" "session-settings: headers on"
  expect_match "$boxed" "^┌─+┐$" "session-settings: box mode"
}

check_in_flight() {
  expect_success "in-flight"
  expect_eq "$(wc -l <<<"$OUT")" 1 "in-flight lists one intent"
  expect_match "$OUT" "^payout:batch-9\|payout\|treasury-agent\|[^|]+:${session_pid}\|" \
    "in-flight names the live holder process"
}

check_order_refused_commits() {
  expect_success "order-refused-commits"
  expect_eq "$(wc -l <<<"$OUT")" 1 "order-refused-commits lists the one refused commit on the order"
  expect_match "$OUT" "\|receipt:order-123\|[^|]+\|already_committed\|\{\"retry\":2,\"sent\":true\}$" \
    "order-refused-commits shows the result of the effect that ran"
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
  expect_eq "$(q "$LEDGER" "SELECT actor || '|' || json_extract(detail, '\$.reason') || '|' || json_extract(detail, '\$.previous_state') FROM events WHERE kind = 'cleared' AND intent = 'charge:order-124'")" \
    "alice|provider dashboard shows no charge for order 124|failed" "clear writes who, why and what it was to the event log"
  expect_eq "$(q "$LEDGER" "SELECT previous_state FROM clears WHERE intent = 'charge:order-124'")" "failed" \
    "clear records the previous state"
}

check_clear_confirm() {
  expect_success "clear-confirm"
  expect_match "$OUT" '^charge:order-124\|cleared\|provider dashboard shows no charge for order 124$' "clear-confirm shows the state"
  expect_match "$OUT" '\|charge:order-124\|alice\|provider dashboard shows no charge for order 124\|failed$' "clear-confirm shows the clear"
  expect_match "$OUT" '\|cleared\|alice\|\{.*"previous_state":"failed"' "clear-confirm shows the event"
  # A running fence sees the clear at once: the next prepare is a fresh attempt.
  expect_eq "$(session prepare charge:order-124)" "admitted" "the live fence admits the cleared intent afresh"
  expect_match "$(session commit charge:order-124)" "^committed [0-9a-f]{64}$" "the fresh attempt commits"
  expect_eq "$(state_of charge:order-124)" "done" "the cleared intent is done after its fresh attempt"
}

check_cli_clear() {
  expect_success "cli-clear"
  expect_match "$OUT" "^charge:order-125  \[unknown since " "cli-clear: fenced lists the intent first"
  expect_match "$OUT" "^cleared charge:order-125 \(was unknown\) by bob: provider API" "cli-clear: clear reports it"
  expect_eq "$(state_of charge:order-125)" "cleared" "cli-clear clears the intent"
  expect_eq "$(q "$LEDGER" "SELECT actor FROM events WHERE kind = 'cleared' AND intent = 'charge:order-125'")" "bob" \
    "cli-clear records the operator"
}

check_audit_is_append_only() {
  CHECKS=$((CHECKS + 1))
  if [[ $RC -ne 0 ]]; then pass "audit-is-append-only fails"; else fail "audit-is-append-only should fail"; fi
  expect_eq "$(count_matches "$ERR" 'effectfence: the event log is append-only')" 3 "UPDATE, DELETE and REPLACE on events are refused"
  expect_eq "$(count_matches "$ERR" 'effectfence: certificates are immutable')" 3 "UPDATE, DELETE and REPLACE on certificates are refused"
  expect_eq "$(count_matches "$ERR" 'effectfence: clears are an audit record')" 3 "UPDATE, DELETE and REPLACE on clears are refused"
  expect_eq "$(count_matches "$ERR" 'effectfence: .*(already recorded|cannot be replaced)')" 3 \
    "each REPLACE is refused by the trigger against replacing"
  expect_eq "$(fingerprint)" "$BEFORE" "audit-is-append-only changes nothing"
}

# SQLite's page adds a REPLACE, which PostgreSQL does not have.
check_clear_by_hand_refused_in_dialect() {
  expect_match "$ERR" "effectfence: an intent cannot be replaced" "clear-by-hand-refused: replacing a fenced intent's row is refused"
}

check_triggers() {
  expect_success "triggers"
  expect_eq "$(tr '\n' ' ' <<<"$OUT")" \
    "archive_in_progress_fixed|archive_in_progress archive_in_progress_recorded|archive_in_progress archives_chained|archives archives_immutable_delete|archives archives_immutable_update|archives certificates_immutable_delete|certificates certificates_immutable_replace|certificates certificates_immutable_update|certificates clears_append_only_delete|clears clears_append_only_renumber|clears clears_append_only_replace|clears clears_append_only_update|clears clears_apply|clears clears_check|clears domains_evicted_with_event|domains domains_renumbered_never|domains domains_replaced_never|domains domains_sequence_kept|domains events_append_only_delete|events events_append_only_replace|events events_append_only_update|events intents_cleared_through_clears|intents intents_done_kept|intents intents_done_with_certificate|intents intents_follow_state_machine|intents intents_holder_kept|intents intents_in_flight_fenced_with_event|intents intents_renamed_never|intents intents_renumbered_never|intents intents_replaced_never|intents intents_results_kept|intents intents_swept_remembered|intents intents_unfinished_kept|intents signatures_immutable_delete|signatures signatures_immutable_replace|signatures signatures_immutable_update|signatures " \
    "triggers lists every protection"
}

check_last_hour() {
  expect_success "last-hour"
  expect_match "$OUT" '\|cleared\|charge:order-124\|alice\|provider dashboard' "last-hour shows the clear"
  expect_match "$OUT" "\|charge:order-123\|charge\|$(cert_of charge:order-123)$" "last-hour shows recent effects"
  expect_no_match "$OUT" 'order-10[0-4]' "last-hour leaves out what happened two days ago"
  local summed expected
  summed=$(grep -E '^[a-z_]+\|[0-9]+$' <<<"$OUT" | awk -F'|' '{ n += $2 } END { print n + 0 }')
  expected=$(q "$LEDGER" "SELECT count(*) FROM events WHERE at >= (strftime('%s', 'now') - 3600) * 1000")
  expect_eq "$summed" "$expected" "last-hour's summary counts every recent event"
}

check_size() {
  expect_success "size"
  local stats
  stats=$("$EF" stats --db "$LEDGER" --json)
  expect_match "$OUT" "^certificates\|$(jq .certificates <<<"$stats")$" "size counts certificates"
  expect_match "$OUT" "^events\|$(jq .events <<<"$stats")$" "size counts events"
  expect_match "$OUT" "^done\|$(jq .intents.done <<<"$stats")$" "size counts intents by state"
  expect_match "$OUT" '^[0-9]+\|[0-9]+$' "size shows the file size"
}

check_retention() {
  expect_success "retention"
  expect_match "$OUT" '^result_ttl_ms\|[0-9]+$' "retention shows the ledger's result TTL"
  expect_eq "$(q "$LEDGER" "SELECT value FROM retention WHERE name = 'result_ttl_ms'")" 3600000 \
    "retention: the row is lowered to an hour"
}

before_sweep() {
  expect_eq "$(q "$LEDGER" "SELECT count(*) FROM intents WHERE intent IN ($OLD_INTENTS)")" 6 "two-day-old intents exist before the sweep"
  CERTIFICATES_BEFORE=$(q "$LEDGER" "SELECT count(*) FROM certificates")
}

check_sweep() {
  expect_success "sweep"
  expect_eq "$(q "$LEDGER" "SELECT count(*) FROM intents WHERE intent IN ($OLD_INTENTS)")" 0 "sweep removes intents done before the cutoff"
  expect_eq "$(state_of charge:order-123)" "done" "sweep keeps recent results"
  expect_eq "$(q "$LEDGER" "SELECT count(*) FROM certificates")" "$CERTIFICATES_BEFORE" "sweep keeps every certificate"
  expect_eq "$(q "$LEDGER" "SELECT actor || '|' || json_extract(detail, '\$.intents') FROM events WHERE kind = 'swept'")" "alice|6" \
    "sweep records what it removed"
}

check_compact() {
  expect_success "compact"
  expect_match "$OUT" '^0\|' "compact: the checkpoint completes"
  expect_match "$OUT" '^ok$' "compact: quick_check is ok"
  expect_eq "$(q "$LEDGER" "SELECT count(*) FROM certificates")" "$CERTIFICATES_BEFORE" "compact keeps every certificate"
  expect_eq "$(stat -c %s "$LEDGER-wal" 2>/dev/null || echo 0)" 0 "compact truncates the WAL"
  "$EF" verify --db "$LEDGER" >/dev/null
  expect_eq "$?" 0 "the compacted ledger verifies"
}

check_backup() {
  expect_success "backup"
  expect_match "$OUT" '^ok$' "backup: quick_check of the copy is ok"
  expect_match "$OUT" 'every hash, body and parent link checks out' "backup: the copy verifies"
  local copy
  for copy in effectfence-backup.sqlite effectfence-backup-compact.sqlite; do
    expect_eq "$(q "$RUN/$copy" "SELECT count(*) FROM certificates")" "$(q "$LEDGER" "SELECT count(*) FROM certificates")" \
      "backup: $copy has every certificate"
    expect_eq "$(q "$RUN/$copy" "PRAGMA application_id")" "$(printf %d 0x45464E43)" "backup: $copy is an effectfence ledger"
    expect_eq "$(q "$RUN/$copy" "SELECT state FROM intents WHERE intent = 'payout:batch-9'")" "in_flight" \
      "backup: $copy was taken while serving (it holds the live attempt)"
  done
}

check_export_verify() {
  expect_eq "$RC" 0 "export-verify runs"
  # export --out reports what it wrote on stderr; anything else is an error.
  expect_eq "$(grep -Ev '^effectfence export: wrote [0-9]+ certificate\(s\) and [0-9]+ event\(s\) to ' <<<"$ERR")" "" \
    "export-verify prints no error"
  expect_eq "$(jq -c 'select(.type == "certificate")' "$RUN/audit.jsonl" | wc -l)" \
    "$(q "$LEDGER" "SELECT count(*) FROM certificates")" "export-verify: the dump has every certificate"
  expect_eq "$(jq -c 'select(.type == "event")' "$RUN/audit.jsonl" | wc -l)" \
    "$(q "$LEDGER" "SELECT count(*) FROM events")" "export-verify: the dump has every event"
  expect_eq "$(jq -c 'select(.type == "certificate")' "$RUN/last-hour.jsonl" | wc -l)" \
    "$(q "$LEDGER" "SELECT count(*) FROM certificates WHERE committed_at >= (strftime('%s', 'now') - 3600) * 1000")" \
    "export-verify: --since 1h has every recent certificate"
  expect_eq "$(jq -r 'select(.type != "export") | (.committed_at_ms // .at_ms)' "$RUN/last-hour.jsonl" |
    awk -v cutoff="$(($(date +%s) * 1000 - 3600000))" '$1 < cutoff' | wc -l)" 0 \
    "export-verify: --since 1h leaves out older records"
  expect_match "$(head -1 "$RUN/audit.csv")" '^type,at,at_ms,' "export-verify: the CSV has its header"
  expect_match "$OUT" '^export audit.jsonl: [0-9]+ certificate' "export-verify: verify checked the dump"
}

# --- run ------------------------------------------------------------------------

EXPECTED="session-settings.sql what-is-fenced.sql in-flight.sql intent-history.sql order-123.sql order-refused-commits.sql clear.sql \
clear-confirm.sql clear-refused-done.sql clear-refused-in-flight.sql clear-refused-unknown.sql cli-clear.sh clear-by-hand-refused.sql \
audit-is-append-only.sql triggers.sql last-hour.sql domain-sequences.sql counters.sql size.sql retention.sql sweep.sql \
compact.sql backup.sh export-verify.sh metrics.sh"

"$FIXTURE" populate "$LEDGER" || { fail "could not write the ledger"; finish; exit 1; }
start_session
expect_eq "$(session prepare payout:batch-9)" "admitted" "the live fence holds a payout in flight"

run_runbook "$EXPECTED" "runbook" || { finish; exit 1; }

expect_match "$(session commit payout:batch-9)" "^committed [0-9a-f]{64}$" "the payout held through all of this commits"
echo quit >&"${SESSION[1]}"
wait "$session_pid"
expect_eq "$?" 0 "the live fence exits cleanly"
finish
