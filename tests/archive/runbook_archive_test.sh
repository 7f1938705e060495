#!/usr/bin/env bash
# Runs the ```sh blocks of docs/OPERATIONS.md's "Archiving old history"
# (each marked "<!-- archive-test: NAME -->") with the real effectfence, in
# page order, against a ledger real serve processes wrote: history from 40
# days ago (the servers run under faketime, their results swept after one
# second), and today's. The page's `--before 30d` must move exactly the
# old swept history, and verify --archive must pass.
#   runbook_archive_test.sh EFFECTFENCE SQLITE3 OPERATIONS.md
set -uo pipefail
EF=$(realpath "$1")
SQLITE3=$(realpath "$2")
DOC=$3
FIXTURE=unused
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/../operations/lib.sh"
LEDGER=$WORK/ledger.sqlite
SHELL_TOOL=$SQLITE3
MARKER=archive-test
QUERY_LANG=none  # the section has only ```sh blocks
run_query_block() { return 1; }
ledger_q() { q "$LEDGER" "$1"; }
source "$HERE/../operations/runbook_lib.sh"

export EFFECTFENCE_RESULT_TTL_SECS=1 EFFECTFENCE_SWEEP_INTERVAL_SECS=0.2
# libfaketime is preloaded; a sanitizer build must not insist on coming first.
FORTY_DAYS_AGO=(env "ASAN_OPTIONS=${ASAN_OPTIONS:-}:verify_asan_link_order=0" faketime -f -40d)
r=$("${FORTY_DAYS_AGO[@]}" node "$HERE/pairs.mjs" "$EF" "$LEDGER" --pairs 400 --prefix old)
expect_match "$r" '"committed":400,"anomalies":0' "400 pairs committed 40 days ago"
sleep 1.2
# A server of that time sweeps them (its results, too, replay for a second).
"${FORTY_DAYS_AGO[@]}" node "$HERE/pairs.mjs" "$EF" "$LEDGER" --seconds 1.5 --prefix old-sweeper >/dev/null
node "$HERE/pairs.mjs" "$EF" "$LEDGER" --pairs 40 --prefix today >/dev/null
THIRTY_DAYS_AGO=$(( $(date +%s%3N) - 30 * 86400000 ))
OLD_CERTS=$(q "$LEDGER" "SELECT count(*) FROM certificates c WHERE c.committed_at < $THIRTY_DAYS_AGO AND
                         NOT EXISTS (SELECT 1 FROM intents i WHERE i.intent = c.intent) AND
                         NOT EXISTS (SELECT 1 FROM domains d WHERE d.head = c.hash)")
expect_match "$OLD_CERTS" '^[0-9]+$' "the old history was swept ($OLD_CERTS certificates older than 30 days, swept)"
TODAY=$(q "$LEDGER" "SELECT count(*) FROM certificates WHERE intent LIKE 'today-%'")

check_archive_run() {
  expect_success "archive-run"
  expect_match "$OUT" "^archived [0-9]+ segment\(s\) into ledger-archive: $OLD_CERTS certificates, 0 signatures, $((2 * OLD_CERTS)) events, 0 clears older than " \
    "archive-run: moves the swept history older than 30 days, as the page shows"
  expect_eq "$(q "$LEDGER" "SELECT count(*) FROM certificates WHERE intent LIKE 'today-%'")" "$TODAY" \
    "archive-run: today's history stays"
  expect_eq "$(ls "$RUN/ledger-archive" | grep -c '^segment-[0-9]*\.jsonl$')" \
    "$(q "$LEDGER" "SELECT count(*) FROM archives")" "archive-run: one file per recorded segment"
}

check_archive_verify() {
  expect_success "archive-verify"
  expect_match "$OUT" "^archived: [0-9]+ segment\(s\) holding $OLD_CERTS certificate\(s\), 0 signature\(s\), $((2 * OLD_CERTS)) event\(s\), 0 clear\(s\); read [0-9]+ segment\(s\) in ledger-archive" \
    "archive-verify: the line the page shows"
  # Negative control: the same command with a segment gone fails, naming it.
  mv "$RUN/ledger-archive/segment-000001.jsonl" "$WORK/aside"
  local out rc
  out=$(cd "$RUN" && "$EF" verify --db "$LEDGER" --archive ledger-archive 2>&1)
  rc=$?
  mv "$WORK/aside" "$RUN/ledger-archive/segment-000001.jsonl"
  expect_eq "$rc" 1 "archive-verify: fails once a segment is gone"
  expect_match "$out" "segment-000001.jsonl is missing" "archive-verify: ... naming it"
}

check_archive_records() {
  expect_success "archive-records"
  expect_eq "$(count_matches "$OUT" '^[0-9]+\|segment-[0-9]{6}\.jsonl\|[0-9]+\|[0-9]+\|0\|[0-9a-f]{64}$')" \
    "$(q "$LEDGER" "SELECT count(*) FROM archives")" "archive-records: one line per segment"
}

EXPECTED="archive-run.sh archive-verify.sh archive-records.sh"
if ! blocks=$(extract_blocks); then
  fail "OPERATIONS.md has malformed archive-test blocks"
  finish
  exit 1
fi
expect_eq "$(tr '\n' ' ' <<<"$blocks" | sed 's/ $//')" "$EXPECTED" "OPERATIONS.md has the archive blocks this test checks, in order"
for block in $blocks; do
  run_block "$block"
  name=${block%.*}
  "check_${name//-/_}"
done
finish
