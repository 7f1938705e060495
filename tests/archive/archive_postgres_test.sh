#!/usr/bin/env bash
# Archive segments on a PostgreSQL ledger, end to end, with real processes
# and the stock psql: `effectfence serve` fills the ledger (pairs.mjs),
# `effectfence archive` moves its old history into segments, `verify
# --archive` checks both as one history and fails, naming the file, on a
# segment edited, removed or reordered; psql shows every other deletion
# still refused; SIGKILLs of the archive at random points lose no row; a
# server keeps answering while it runs. Each run works in a schema of its
# own. Sized for CI: about two hundred pairs, a few kills.
#   archive_postgres_test.sh EFFECTFENCE POSTGRES_URL PSQL [KILLS]
set -uo pipefail
EF=$(realpath "$1")
PG_URL=$2
PSQL=$3
KILLS=${4:-5}
FIXTURE=unused
SQLITE3=unused
HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=../operations/lib.sh
source "$HERE/../operations/lib.sh"
# Results replay for 0.3 s, then each server sweeps them within 0.1 s.
export EFFECTFENCE_RESULT_TTL_SECS=0.3 EFFECTFENCE_SWEEP_INTERVAL_SECS=0.1

SCHEMAS=()
new_ledger() {  # new_ledger NAME: prints the --db value of a fresh ledger in a schema of its own
  local schema="archive_$1_$$"
  "$PSQL" -qX "$PG_URL" -c "DROP SCHEMA IF EXISTS $schema CASCADE; CREATE SCHEMA $schema" >/dev/null 2>&1
  SCHEMAS+=("$schema")
  local sep='?'
  [[ "$PG_URL" == *\?* ]] && sep='&'
  echo "${PG_URL}${sep}options=-csearch_path%3D$schema"
}
drop_schemas() {
  local s
  for s in "${SCHEMAS[@]}"; do "$PSQL" -qX "$PG_URL" -c "DROP SCHEMA IF EXISTS $s CASCADE" >/dev/null 2>&1; done
}
trap 'drop_schemas; cleanup' EXIT
sql() { "$PSQL" -qXAt -v ON_ERROR_STOP=1 "$1" -c "$2" 2>&1; }

pairs() { node "$HERE/pairs.mjs" "$EF" "$@"; }
now_iso() { date -u +%Y-%m-%dT%H:%M:%S.%3NZ; }
# Every row the history holds, one key a line, from the ledger and from the
# segments it records (archive_test.sh has the same for SQLite).
keys() {  # keys LEDGER [DIR]
  {
    sql "$1" "SELECT 'c:' || hash FROM certificates UNION ALL SELECT 's:' || certificate FROM signatures
              UNION ALL SELECT 'e:' || id FROM events UNION ALL SELECT 'k:' || id FROM clears"
    if [[ -n "${2:-}" ]]; then
      local f
      for f in $(sql "$1" "SELECT file FROM archives ORDER BY segment"); do
        jq -r 'if .type == "certificate" then "c:" + .hash elif .type == "signature" then "s:" + .certificate
               elif .type == "event" then "e:" + (.id | tostring) elif .type == "clear" then "k:" + (.id | tostring)
               else empty end' "$2/$f"
      done
    fi
  } | sort
}
verify_archive() {  # verify_archive LEDGER DIR [ARGS...]: sets OUT and RC
  local ledger=$1 dir=$2
  shift 2
  OUT=$("$EF" verify --db "$ledger" --archive "$dir" "$@" 2>&1)
  RC=$?
}
old_history() {  # old_history LEDGER N PREFIX: N swept pairs older than CUTOFF, a few newer ones
  local r
  r=$(pairs "$1" --pairs "$2" --prefix "$3")
  expect_match "$r" "\"committed\":$2,\"anomalies\":0" "$3: $2 pairs committed through serve on PostgreSQL"
  sleep 0.5
  CUTOFF=$(now_iso)
  sleep 0.1
  pairs "$1" --seconds 1 --prefix "$3-new" >/dev/null
  expect_eq "$(sql "$1" "SELECT count(*) FROM intents WHERE intent LIKE '$3-%' AND intent NOT LIKE '$3-new-%'")" 0 \
    "$3: the old intents were swept (their results no longer replay)"
}

# --- 1. archive, then verify the whole history --------------------------------
# The servers sign their certificates: the signatures move too, each just
# before its certificate (PostgreSQL's foreign key), and the archive signs
# each segment's root.
L=$(new_ledger one)
A=$WORK/one.archive
"$EF" keygen --out "$WORK/archive.key" >/dev/null
EFFECTFENCE_SIGNING_KEY=$WORK/archive.key old_history "$L" 60 a
BEFORE=$(keys "$L")
OUT=$("$EF" archive --db "$L" --before "$CUTOFF" --out "$A" --rows 60 --signing-key "$WORK/archive.key" --json 2>&1)
expect_eq "$(jq -r '.certificates' <<<"$OUT")" 60 "archive moved the 60 old certificates ($OUT)"
expect_eq "$(jq -r '[.signatures, .events] | @text' <<<"$OUT")" "[60,120]" "... their 60 signatures and 120 events"
expect_eq "$(jq -r '.segments' <<<"$OUT")" 4 "in segments of at most 60 rows"
expect_eq "$(sql "$L" "SELECT count(*) FROM certificates WHERE intent LIKE 'a-%' AND intent NOT LIKE 'a-new-%'")" 0 \
  "the ledger no longer holds them"
expect_eq "$(keys "$L" "$A")" "$BEFORE" "the ledger and the segments hold every row the ledger held, once"
expect_eq "$(sql "$L" "SELECT count(*) FROM archive_in_progress")" 0 "no deletion window is left open"
verify_archive "$L" "$A" --public-key "$WORK/archive.key.pub"
expect_eq "$RC" 0 "verify --archive passes on the archived PostgreSQL ledger ($OUT)"
expect_match "$OUT" "archived: 4 segment\(s\) holding 60 certificate\(s\), 60 signature\(s\), 120 event\(s\).*read 4 segment\(s\) in [^ ]* \(4 signed root\(s\) verified\)" \
  "verify --archive counts what was archived, read every segment and checked every root's signature"
ROOT4=$(sql "$L" "SELECT root FROM archives WHERE segment = 4")
expect_eq "$(tail -n 1 "$A/segment-000004.jsonl" | jq -r .root)" "$ROOT4" "the ledger records each segment's root hash"
OUT=$("$EF" archive --db "$L" --before "$CUTOFF" --out "$A" --json 2>&1)
expect_eq "$(jq -r '.segments' <<<"$OUT")" 0 "a second archive with the same cutoff finds nothing more"
"$EF" export --db "$L" --out "$WORK/one.jsonl" >/dev/null 2>&1
OUT=$("$EF" verify --export "$WORK/one.jsonl" 2>&1)
expect_eq "$?" 0 "a plain verify --export of the archived PostgreSQL ledger's dump passes ($OUT)"
expect_match "$OUT" "archived before this dump: 4 segment\(s\).*continues from segment root $ROOT4" \
  "... saying which segment root it continues from"
OUT=$("$EF" verify --export "$WORK/one.jsonl" --archive "$A" 2>&1)
expect_eq "$?" 0 "verify --export --archive checks the dump and its segments as one history ($OUT)"

# --- 2. a segment edited, removed or reordered fails, naming it ---------------
damaged() {  # damaged NAME: a copy of the archive to damage
  rm -rf "$WORK/$1"
  cp -r "$A" "$WORK/$1"
  echo "$WORK/$1"
}
D=$(damaged edited)
sed -i '2s/r-/r-9/' "$D/segment-000003.jsonl"
verify_archive "$L" "$D"
expect_eq "$RC" 1 "a segment with an edited line fails"
expect_match "$OUT" "segment_altered.*segment-000003.jsonl: its lines hash to" "... naming the edited file"
OUT=$("$EF" verify --export "$WORK/one.jsonl" --archive "$D" 2>&1)
expect_match "$OUT" "segment_altered.*segment-000003.jsonl" "the same edited segment under the ledger's dump fails, naming it"
D=$(damaged removed)
rm "$D/segment-000002.jsonl"
verify_archive "$L" "$D"
expect_eq "$RC" 1 "a segment removed fails"
expect_match "$OUT" "segment_missing.*segment-000002.jsonl is missing" "... naming the missing file"
D=$(damaged swapped)
mv "$D/segment-000001.jsonl" "$D/swap"
mv "$D/segment-000003.jsonl" "$D/segment-000001.jsonl"
mv "$D/swap" "$D/segment-000003.jsonl"
verify_archive "$L" "$D"
expect_eq "$RC" 1 "two segments swapped fail"
expect_match "$OUT" "segment-000001.jsonl holds segment 3" "... naming the first file"
expect_match "$OUT" "segment-000003.jsonl holds segment 1" "... and the second"
D=$(damaged unchanged)
verify_archive "$L" "$D"
expect_eq "$RC" 0 "an unchanged copy of the archive passes (the checks above fail on the damage alone)"

# --- 3. every other deletion is still refused ---------------------------------
OUT=$(sql "$L" "DELETE FROM certificates")
expect_match "$OUT" "ERROR:  effectfence: certificates are immutable" "a plain DELETE FROM certificates is refused"
OUT=$(sql "$L" "UPDATE certificates SET body = body")
expect_match "$OUT" "ERROR:  effectfence: certificates are immutable" "an UPDATE of certificates is refused"
OUT=$(sql "$L" "DELETE FROM events WHERE id = (SELECT min(id) FROM events)")
expect_match "$OUT" "ERROR:  effectfence: the event log is append-only" "an event deleted by hand is refused"
OUT=$(sql "$L" "TRUNCATE certificates CASCADE")
expect_match "$OUT" "ERROR:  effectfence: certificates are immutable" "TRUNCATE is refused"
OUT=$(sql "$L" "BEGIN; INSERT INTO archive_in_progress VALUES (1, repeat('0', 64), 9000000000000000);
  DELETE FROM events WHERE kind = 'swept'; COMMIT;")
expect_match "$OUT" "append-only" "even inside a deletion window, the sweeps' events (no intent) are refused"
OUT=$(sql "$L" "BEGIN; INSERT INTO archive_in_progress VALUES (1, repeat('0', 64), 9000000000000000);
  DELETE FROM certificates WHERE hash = (SELECT head FROM domains WHERE head IS NOT NULL LIMIT 1); COMMIT;")
expect_match "$OUT" "certificates are immutable" "... and so is a domain's head certificate"
OUT=$(sql "$L" "BEGIN; INSERT INTO archive_in_progress VALUES (1, repeat('0', 64), 0);
  DELETE FROM events WHERE id = (SELECT max(id) FROM events WHERE intent IS NOT NULL); COMMIT;")
expect_match "$OUT" "append-only" "inside a deletion window, rows newer than its cutoff are refused"
expect_eq "$(sql "$L" "SELECT count(*) FROM archive_in_progress")" 0 "... and the window closes with the failed transaction"
OUT=$(sql "$L" "INSERT INTO archives (segment, ledger_id, file, root, before_ms, certificates, signatures, events,
  clears, archived_at) VALUES (5, repeat('0', 32), 'x', repeat('0', 64), 0, 0, 0, 0, 0, 0)")
expect_match "$OUT" "recorded only by effectfence archive" "an archive record inserted by hand is refused"
OUT=$(sql "$L" "DELETE FROM archives")
expect_match "$OUT" "archive records are immutable" "an archive record deleted by hand is refused"
expect_eq "$(keys "$L" "$A")" "$BEFORE" "none of those attempts changed a row"

# --- 4. a server keeps answering while an archive runs ------------------------
S=$(new_ledger serve)
old_history "$S" 60 s
pairs "$S" --seconds 120 --stop-file "$WORK/stop" --prefix live >"$WORK/live.json" &
LIVE=$!
sleep 1
START=$(date +%s%N)
OUT=$("$EF" archive --db "$S" --before "$CUTOFF" --out "$WORK/serve.archive" --rows 12 --json 2>&1)
SPAN_MS=$(( ($(date +%s%N) - START) / 1000000 ))
expect_eq "$(jq -r '.certificates' <<<"$OUT")" 60 "archive ran beside a busy server ($(jq -r .segments <<<"$OUT") segments)"
kill -0 "$LIVE" 2>/dev/null
expect_eq "$?" 0 "the server was still being driven when the archive finished"
touch "$WORK/stop"
wait "$LIVE"
LIVE_OUT=$(cat "$WORK/live.json")
expect_match "$LIVE_OUT" '"anomalies":0' "every prepare and commit during the archive was answered correctly ($LIVE_OUT)"
expect_no_match "$LIVE_OUT" '"committed":0,' "the server committed pairs while the archive ran"
verify_archive "$S" "$WORK/serve.archive"
expect_eq "$RC" 0 "verify --archive passes after archiving under load ($OUT)"

# --- 5. SIGKILL at random points never loses a row -----------------------------
K=$(new_ledger kill)
KA=$WORK/kill.archive
# The kills fall anywhere in the first 2.5 s, or in the time section 4's
# archive of a ledger of the same size took, if shorter: each killed run
# resumes where the one before stopped, so later kills reach further in.
(( SPAN_MS > 2500 )) && SPAN_MS=2500
old_history "$K" 60 x
EVERYTHING=$(keys "$K")
lost=0
unverified=0
for i in $(seq 1 "$KILLS"); do
  "$EF" archive --db "$K" --before "$CUTOFF" --out "$KA" --rows 10 >/dev/null 2>&1 &
  victim=$!
  delay=$(( (RANDOM * 32768 + RANDOM) % (SPAN_MS + 1) ))
  sleep "$((delay / 1000)).$(printf '%03d' $((delay % 1000)))"
  kill -9 "$victim" 2>/dev/null
  wait "$victim" 2>/dev/null
  missing=$(comm -23 <(echo "$EVERYTHING") <(keys "$K" "$KA" | sort -u) | wc -l)
  [[ "$missing" -eq 0 ]] || { lost=$((lost + 1)); echo "kill $i: $missing row(s) lost" >&2; }
  verify_archive "$K" "$KA"
  [[ "$RC" -eq 0 ]] || { unverified=$((unverified + 1)); echo "kill $i: verify: $OUT" >&2; }
done
expect_eq "$lost" 0 "$KILLS SIGKILLs of archive at random points (0 to $SPAN_MS ms) lost no row"
expect_eq "$unverified" 0 "verify --archive passed after each of them"
expect_eq "$(sql "$K" "SELECT count(*) FROM archive_in_progress")" 0 "no killed run left its deletion window open"
"$EF" archive --db "$K" --before "$CUTOFF" --out "$KA" --rows 25 >/dev/null 2>&1
expect_eq "$(keys "$K" "$KA")" "$EVERYTHING" "an archive run to the end after the kills holds every row exactly once"
verify_archive "$K" "$KA"
expect_eq "$RC" 0 "verify --archive passes at the end ($OUT)"

finish
