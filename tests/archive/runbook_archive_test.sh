#!/usr/bin/env bash
# Runs the ```sh blocks of docs/OPERATIONS.md's "Archiving old history"
# (each marked "<!-- archive-test: NAME -->") with the real effectfence, in
# page order, against a ledger real serve processes wrote: history from 40
# days ago (the servers run under faketime, their results swept after one
# second), and today's. The page's `--before 30d` must move exactly the
# old swept history, and verify --archive must pass.
#   runbook_archive_test.sh EFFECTFENCE SQLITE3 OPERATIONS.md [POSTGRES_URL PSQL]
# With POSTGRES_URL the blocks run against a PostgreSQL ledger (in a schema
# of its own), its -postgres blocks in place of the sqlite3 one. PostgreSQL
# dates rows by the database server's clock, which faketime cannot move
# back: there the history is written now and the blocks' effectfence runs
# 40 days ahead instead, so `--before 30d` again falls between the old
# swept history and today's, whose results still replay.
set -uo pipefail
EF=$(realpath "$1")
SQLITE3=$(realpath "$2")
DOC=$3
PG_URL=${4:-}
PSQL=${5:-psql}
FIXTURE=unused
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/../operations/lib.sh"
MARKER=archive-test
QUERY_LANG=none  # the section has only ```sh blocks
run_query_block() { return 1; }
if [[ -z "$PG_URL" ]]; then
  LEDGER=$WORK/ledger.sqlite
  SHELL_TOOL=$SQLITE3
  ledger_q() { q "$LEDGER" "$1"; }
else
  SCHEMA="archive_runbook_$$"
  "$PSQL" -qX "$PG_URL" -c "DROP SCHEMA IF EXISTS $SCHEMA CASCADE; CREATE SCHEMA $SCHEMA" >/dev/null 2>&1
  trap '"$PSQL" -qX "$PG_URL" -c "DROP SCHEMA IF EXISTS $SCHEMA CASCADE" >/dev/null 2>&1; cleanup' EXIT
  sep='?'
  [[ "$PG_URL" == *\?* ]] && sep='&'
  LEDGER="${PG_URL}${sep}options=-csearch_path%3D$SCHEMA"
  SHELL_TOOL=$(command -v "$PSQL")
  ledger_q() { "$PSQL" -qXAt "$LEDGER" -c "$1"; }
fi
source "$HERE/../operations/runbook_lib.sh"

export EFFECTFENCE_RESULT_TTL_SECS=1 EFFECTFENCE_SWEEP_INTERVAL_SECS=0.2
# libfaketime is preloaded; a sanitizer build must not insist on coming first.
export ASAN_OPTIONS=${ASAN_OPTIONS:-}:verify_asan_link_order=0
OLD=()
[[ -z "$PG_URL" ]] && OLD=(faketime -f -40d)
r=$("${OLD[@]}" node "$HERE/pairs.mjs" "$EF" "$LEDGER" --pairs 400 --prefix old)
expect_match "$r" '"committed":400,"anomalies":0' "400 pairs committed 40 days before the blocks run"
sleep 1.2
# A server of that time sweeps them (its results, too, replay for a second).
"${OLD[@]}" node "$HERE/pairs.mjs" "$EF" "$LEDGER" --seconds 1.5 --prefix old-sweeper >/dev/null
if [[ -z "$PG_URL" ]]; then
  node "$HERE/pairs.mjs" "$EF" "$LEDGER" --pairs 40 --prefix today >/dev/null
  THIRTY_DAYS_AGO=$(( $(date +%s%3N) - 30 * 86400000 ))
else
  # Today's results replay for an hour: not swept while the test runs.
  EFFECTFENCE_RESULT_TTL_SECS=3600 node "$HERE/pairs.mjs" "$EF" "$LEDGER" --pairs 40 --prefix today >/dev/null
  THIRTY_DAYS_AGO=$(( $(date +%s%3N) + 10 * 86400000 ))  # 30 days before the blocks' clock
  # The blocks' effectfence: the real one, 40 days ahead.
  mkdir -p "$WORK/ahead"
  printf '#!/usr/bin/env bash\nexec faketime -f +40d %q "$@"\n' "$EF" >"$WORK/ahead/effectfence"
  chmod +x "$WORK/ahead/effectfence"
  EF=$WORK/ahead/effectfence
fi
OLD_CERTS=$(ledger_q "SELECT count(*) FROM certificates c WHERE c.committed_at < $THIRTY_DAYS_AGO AND
                         NOT EXISTS (SELECT 1 FROM intents i WHERE i.intent = c.intent) AND
                         NOT EXISTS (SELECT 1 FROM domains d WHERE d.head = c.hash)")
expect_match "$OLD_CERTS" '^[1-9][0-9]*$' "the old history was swept ($OLD_CERTS certificates older than 30 days, swept)"
TODAY=$(ledger_q "SELECT count(*) FROM certificates WHERE intent LIKE 'today-%'")

check_archive_run() {
  expect_success "archive-run"
  expect_match "$OUT" "^archived [0-9]+ segment\(s\) into ledger-archive: $OLD_CERTS certificates, 0 signatures, $((2 * OLD_CERTS)) events, 0 clears older than " \
    "archive-run: moves the swept history older than 30 days, as the page shows"
  expect_eq "$(ledger_q "SELECT count(*) FROM certificates WHERE intent LIKE 'today-%'")" "$TODAY" \
    "archive-run: today's history stays"
  expect_eq "$(ls "$RUN/ledger-archive" | grep -c '^segment-[0-9]*\.jsonl$')" \
    "$(ledger_q "SELECT count(*) FROM archives")" "archive-run: one file per recorded segment"
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
  expect_success "$1"
  expect_eq "$(count_matches "$OUT" '^[0-9]+\|segment-[0-9]{6}\.jsonl\|[0-9]+\|[0-9]+\|0\|[0-9a-f]{64}$')" \
    "$(ledger_q "SELECT count(*) FROM archives")" "$1: one line per segment"
}
check_archive_records_postgres() { check_archive_records archive-records-postgres; }

check_archive_export() {
  expect_success "archive-export"
  local segments root
  segments=$(ledger_q "SELECT count(*) FROM archives")
  root=$(ledger_q "SELECT root FROM archives ORDER BY segment DESC LIMIT 1")
  expect_match "$OUT" "^archived before this dump: $segments segment\(s\) holding $OLD_CERTS certificate\(s\), 0 signature\(s\), $((2 * OLD_CERTS)) event\(s\), 0 clear\(s\); the dump continues from segment root $root; read $segments segment\(s\) in ledger-archive" \
    "archive-export: the dump and its segments check out as one history, with the line the page shows"
  # Negative control: the last segment edited fails, naming it.
  local last out rc
  last=$(printf 'segment-%06d.jsonl' "$segments")
  cp "$RUN/ledger-archive/$last" "$WORK/aside"
  sed -i '2s/"tool":"charge_card"/"tool":"charge_cart"/' "$RUN/ledger-archive/$last"
  out=$(cd "$RUN" && "$EF" verify --export ledger.jsonl --archive ledger-archive 2>&1)
  rc=$?
  mv "$WORK/aside" "$RUN/ledger-archive/$last"
  expect_eq "$rc" 1 "archive-export: fails once a segment is not the one the dump continues from"
  expect_match "$out" "segment_altered.*$last" "archive-export: ... naming it"
}

check_archive_refused_postgres() {
  expect_success "archive-refused-postgres"
  expect_match "$OUT" "ERROR:  effectfence: certificates are immutable" "archive-refused-postgres: the page's DELETE is refused"
  expect_eq "$(ledger_q "SELECT count(*) FROM certificates WHERE intent LIKE 'today-%'")" "$TODAY" \
    "archive-refused-postgres: ... and deleted nothing"
}

EXPECTED="archive-run.sh archive-verify.sh archive-records.sh archive-export.sh archive-records-postgres.sh archive-refused-postgres.sh"
if ! blocks=$(extract_blocks); then
  fail "OPERATIONS.md has malformed archive-test blocks"
  finish
  exit 1
fi
expect_eq "$(tr '\n' ' ' <<<"$blocks" | sed 's/ $//')" "$EXPECTED" "OPERATIONS.md has the archive blocks this test checks, in order"
for block in $blocks; do
  name=${block%.*}
  # Each engine's own blocks: sqlite3's on SQLite, psql's on PostgreSQL.
  if [[ -z "$PG_URL" && "$name" == *-postgres ]] || [[ -n "$PG_URL" && "$name" == archive-records ]]; then continue; fi
  run_block "$block"
  if [[ "$name" == archive-records ]]; then check_archive_records archive-records; else "check_${name//-/_}"; fi
done
finish
