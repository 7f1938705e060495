#!/usr/bin/env bash
# Archive segments end to end, on real SQLite files with real processes:
# `effectfence serve` fills ledgers (pairs.mjs), `effectfence archive` moves
# their old history into segments, `effectfence verify --archive` checks the
# ledger and the segments as one history. Every checker is shown failing on
# the damage it exists for (a segment edited, removed, swapped, forged; a
# deletion window left open), and the archive is killed with SIGKILL at
# random points without a row ever being lost.
#   archive_test.sh EFFECTFENCE SQLITE3 [KILLS]
set -uo pipefail
EF=$(realpath "$1")
SQLITE3=$2
KILLS=${3:-20}
FIXTURE=unused
HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=../operations/lib.sh
source "$HERE/../operations/lib.sh"
# Results replay for 0.3 s, then each server sweeps them within 0.1 s.
export EFFECTFENCE_RESULT_TTL_SECS=0.3 EFFECTFENCE_SWEEP_INTERVAL_SECS=0.1

pairs() { node "$HERE/pairs.mjs" "$EF" "$@"; }
now_iso() { date -u +%Y-%m-%dT%H:%M:%S.%3NZ; }
# Every row the history holds, one key a line: certificates by hash, their
# signatures, events and clears by id; from the ledger and, if DIR is given,
# from the segments the ledger records (an unrecorded one is a copy of rows
# still in the ledger).
keys() {  # keys LEDGER [DIR]
  {
    q "$1" "SELECT 'c:' || hash FROM certificates; SELECT 's:' || certificate FROM signatures;
            SELECT 'e:' || id FROM events; SELECT 'k:' || id FROM clears;"
    if [[ -n "${2:-}" ]]; then
      local f
      for f in $(q "$1" "SELECT file FROM archives ORDER BY segment"); do
        jq -r 'if .type == "certificate" then "c:" + .hash elif .type == "signature" then "s:" + .certificate
               elif .type == "event" then "e:" + (.id | tostring) elif .type == "clear" then "k:" + (.id | tostring)
               else empty end' "$2/$f"
      done
    fi
  } | sort
}
verify_archive() {  # verify_archive LEDGER DIR: sets OUT and RC
  OUT=$("$EF" verify --db "$1" --archive "$2" 2>&1)
  RC=$?
}
# A ledger of N committed pairs, every one swept (older than the returned
# cutoff), plus a few newer ones that are not.
old_history() {  # old_history LEDGER N PREFIX: sets CUTOFF
  local r
  r=$(pairs "$1" --pairs "$2" --prefix "$3")
  expect_match "$r" "\"committed\":$2,\"anomalies\":0" "$3: $2 pairs committed through serve"
  sleep 0.5
  CUTOFF=$(now_iso)
  sleep 0.1
  # A second server, running past the TTL, sweeps them (and commits newer ones).
  pairs "$1" --seconds 1 --prefix "$3-new" >/dev/null
  expect_eq "$(q "$1" "SELECT count(*) FROM intents WHERE intent LIKE '$3-%' AND intent NOT LIKE '$3-new-%'")" 0 \
    "$3: the old intents were swept (their results no longer replay)"
}

# --- 1. archive, then verify the whole history --------------------------------
L=$WORK/one.sqlite
A=$WORK/one.archive
old_history "$L" 300 a
BEFORE=$(keys "$L")
OUT=$("$EF" archive --db "$L" --before "$CUTOFF" --out "$A" --rows 200 --json 2>&1)
expect_eq "$(jq -r '.certificates' <<<"$OUT")" 300 "archive moved the 300 old certificates"
expect_eq "$(jq -r '.events' <<<"$OUT")" 600 "archive moved their 600 events (admitted, committed)"
expect_eq "$(jq -r '.segments' <<<"$OUT")" 5 "in segments of at most 200 rows"
expect_eq "$(q "$L" "SELECT count(*) FROM certificates WHERE intent LIKE 'a-%' AND intent NOT LIKE 'a-new-%'")" 0 \
  "the ledger no longer holds them"
expect_eq "$(keys "$L" "$A")" "$BEFORE" "the ledger and the segments hold every row the ledger held, once"
expect_eq "$(ls "$A" | grep -c '\.tmp$')" 0 "no temporary file is left"
verify_archive "$L" "$A"
expect_eq "$RC" 0 "verify --archive passes on the archived ledger ($OUT)"
expect_match "$OUT" "archived: 5 segment\(s\) holding 300 certificate\(s\), 0 signature\(s\), 600 event\(s\)" \
  "verify --archive counts what was archived"
expect_match "$OUT" "read 5 segment\(s\)" "verify --archive read every segment"
OUT=$("$EF" verify --db "$L" 2>&1)
expect_eq "$?" 0 "verify without --archive passes on an archived ledger ($OUT)"
expect_match "$OUT" "not read \(give --archive DIR\)" "verify without --archive says the segments were not read"
OUT=$("$EF" archive --db "$L" --before "$CUTOFF" --out "$A" --json 2>&1)
expect_eq "$(jq -r '.segments' <<<"$OUT")" 0 "a second archive with the same cutoff finds nothing more"
ROOT5=$(q "$L" "SELECT root FROM archives WHERE segment = 5")
expect_eq "$(tail -n 1 "$A/segment-000005.jsonl" | jq -r .root)" "$ROOT5" \
  "the ledger records each segment's root hash"
expect_eq "$(head -n 1 "$A/segment-000002.jsonl" | jq -r .previous)" \
  "$(q "$L" "SELECT root FROM archives WHERE segment = 1")" "each segment's header names the root before it"

# --- 2. each way of damaging the archive fails, naming the file ---------------
damaged() {  # damaged NAME: a copy of the archive to damage
  rm -rf "$WORK/$1"
  cp -r "$A" "$WORK/$1"
  echo "$WORK/$1"
}
D=$(damaged edited)
sed -i '2s/r-/r-9/' "$D/segment-000003.jsonl"  # a certificate's recorded result
verify_archive "$L" "$D"
expect_eq "$RC" 1 "a segment with an edited line fails"
expect_match "$OUT" "segment-000003.jsonl: its lines hash to" "... naming the edited file"
expect_match "$OUT" "segment_altered" "... as altered"

D=$(damaged forged)
# The edit with a root recomputed over it: the file agrees with itself, not with the ledger.
sed -i '4s/"kind":"committed"/"kind":"aborted"/' "$D/segment-000002.jsonl"
head -n -1 "$D/segment-000002.jsonl" >"$WORK/body"
ROOT=$(sha256sum "$WORK/body" | cut -d' ' -f1)
{ cat "$WORK/body"; tail -n 1 "$D/segment-000002.jsonl" | jq -c --arg r "$ROOT" '.root = $r'; } >"$WORK/forged.jsonl"
mv "$WORK/forged.jsonl" "$D/segment-000002.jsonl"
verify_archive "$L" "$D"
expect_eq "$RC" 1 "an edited segment with its root recomputed fails"
expect_match "$OUT" "segment-000002.jsonl: the ledger recorded root" "... naming the file, against the ledger's record"

D=$(damaged removed)
rm "$D/segment-000002.jsonl"
verify_archive "$L" "$D"
expect_eq "$RC" 1 "a segment removed from between two others fails"
expect_match "$OUT" "segment_missing.*segment-000002.jsonl is missing" "... naming the missing file"

D=$(damaged removed-last)
rm "$D/segment-000005.jsonl"
verify_archive "$L" "$D"
expect_eq "$RC" 1 "the last segment removed fails"
expect_match "$OUT" "segment-000005.jsonl is missing" "... naming it (the ledger records it)"

D=$(damaged swapped)
mv "$D/segment-000002.jsonl" "$D/swap"
mv "$D/segment-000004.jsonl" "$D/segment-000002.jsonl"
mv "$D/swap" "$D/segment-000004.jsonl"
verify_archive "$L" "$D"
expect_eq "$RC" 1 "two segments swapped fail"
expect_match "$OUT" "segment-000002.jsonl holds segment 4" "... naming the first file"
expect_match "$OUT" "segment-000004.jsonl holds segment 2" "... and the second"

D=$(damaged added)
cp "$D/segment-000001.jsonl" "$D/segment-000009.jsonl"
verify_archive "$L" "$D"
expect_eq "$RC" 1 "a segment file added by hand fails"
expect_match "$OUT" "segment-000009.jsonl is not recorded" "... naming it"

D=$(damaged unchanged)
verify_archive "$L" "$D"
expect_eq "$RC" 0 "an unchanged copy of the archive passes (the checks above fail on the damage alone)"

# A parent link into the archive needs the segment that holds the parent.
LINKS=$(q "$L" "SELECT count(*) FROM certificates c WHERE c.parent IS NOT NULL AND
                NOT EXISTS (SELECT 1 FROM certificates p WHERE p.hash = c.parent)")
if [[ "$LINKS" -gt 0 ]]; then
  D=$(damaged no-parents)
  rm "$D"/segment-00000[3-5].jsonl
  verify_archive "$L" "$D"
  expect_match "$OUT" "missing_parent.*neither in the ledger nor in any segment" \
    "a kept certificate whose parent's segment is gone fails ($LINKS link(s) cross into the segments)"
else
  fail "no kept certificate has an archived parent: the cross-boundary check went untested"
fi

# --- an export of the archived ledger, checked offline with its segments ------
"$EF" export --db "$L" --out "$WORK/one.jsonl" >/dev/null 2>&1
expect_eq "$(head -n 1 "$WORK/one.jsonl" | jq -c '.archived | [.segments, .root, .certificates, .events]')" \
  "[5,\"$ROOT5\",300,600]" "the dump's header names the segments before it and the root it continues from"
OUT=$("$EF" verify --export "$WORK/one.jsonl" 2>&1)
expect_eq "$?" 0 "a plain verify --export of the archived ledger's dump passes ($OUT)"
expect_match "$OUT" "archived before this dump: 5 segment\(s\) holding 300 certificate\(s\).*continues from segment root $ROOT5.*not read \(give --archive DIR\)" \
  "... saying its history before was archived, and which segment root it continues from"
expect_no_match "$OUT" "missing_parent" "... instead of reporting the parent links into the segments as broken"
OUT=$("$EF" verify --export "$WORK/one.jsonl" --archive "$A" 2>&1)
expect_eq "$?" 0 "verify --export --archive checks the dump and its segments as one history ($OUT)"
expect_match "$OUT" "read 5 segment\(s\)" "... reading every segment"
# Segments archived after the dump are not its history: counted, not read.
"$SQLITE3" "$L" ".backup $WORK/later.sqlite"
cp -r "$A" "$WORK/later.archive"
# (the a-new pairs the sweeping server swept go; the last few it did not stay)
"$EF" archive --db "$WORK/later.sqlite" --before "$(now_iso)" --out "$WORK/later.archive" >/dev/null 2>&1
LATER=$(( $(ls "$WORK/later.archive" | grep -c '^segment-') - 5 ))
expect_match "$LATER" '^[1-9]' "a later archive of the same ledger added segments after the dump"
OUT=$("$EF" verify --export "$WORK/one.jsonl" --archive "$WORK/later.archive" 2>&1)
expect_eq "$?" 0 "segments archived after the dump do not fail it ($OUT)"
expect_match "$OUT" "read 5 segment\(s\) in [^ ]*, $LATER later one\(s\) archived after the dump \(not its history, not read\)" \
  "... they are counted ($LATER) and not read"
# Negative controls: segments that are not the ones the dump continues from.
D=$(damaged export-forged)
# The last segment edited, its root recomputed: it agrees with itself, not with the dump.
sed -i '2s/r-/r-9/' "$D/segment-000005.jsonl"
head -n -1 "$D/segment-000005.jsonl" >"$WORK/body"
ROOT=$(sha256sum "$WORK/body" | cut -d' ' -f1)
{ cat "$WORK/body"; tail -n 1 "$D/segment-000005.jsonl" | jq -c --arg r "$ROOT" '.root = $r'; } >"$WORK/forged.jsonl"
mv "$WORK/forged.jsonl" "$D/segment-000005.jsonl"
OUT=$("$EF" verify --export "$WORK/one.jsonl" --archive "$D" 2>&1)
expect_eq "$?" 1 "a segment that does not match the dump fails verify --export --archive"
expect_match "$OUT" "segment-000005.jsonl: its lines hash to $ROOT, but the export continues from segment root $ROOT5" \
  "... naming the file and the root the dump continues from"
D=$(damaged export-removed)
rm "$D/segment-000003.jsonl"
OUT=$("$EF" verify --export "$WORK/one.jsonl" --archive "$D" 2>&1)
expect_match "$OUT" "segment_missing.*segment-000003.jsonl is missing" "a segment missing under a dump fails, naming it"
OUT=$("$EF" verify --export "$WORK/one.jsonl" --archive "$WORK/edited" 2>&1)
expect_match "$OUT" "segment_altered.*segment-000003.jsonl" "an edited segment under a dump fails, naming it"
# The header's claim removed: the parents into the segments are missing again.
{ head -n 1 "$WORK/one.jsonl" | jq -c 'del(.archived)'; tail -n +2 "$WORK/one.jsonl"; } >"$WORK/claimless.jsonl"
OUT=$("$EF" verify --export "$WORK/claimless.jsonl" 2>&1)
expect_match "$OUT" "missing_parent" "without the header's \"archived\", the same dump's parent links are broken"

# --- signed segments ------------------------------------------------------------
G=$WORK/signed.sqlite
"$EF" keygen --out "$WORK/archive.key" >/dev/null
"$EF" keygen --out "$WORK/other.key" >/dev/null
# The servers sign their certificates with the same key: signatures move too.
EFFECTFENCE_SIGNING_KEY=$WORK/archive.key old_history "$G" 60 g
"$EF" archive --db "$G" --before "$CUTOFF" --out "$WORK/signed.archive" --rows 60 \
  --signing-key "$WORK/archive.key" >/dev/null 2>&1
OUT=$("$EF" verify --db "$G" --archive "$WORK/signed.archive" --public-key "$WORK/archive.key.pub" 2>&1)
expect_eq "$?" 0 "a signed archive verifies with its public key ($OUT)"
expect_match "$OUT" "holding 60 certificate\(s\), 60 signature\(s\), 120 event\(s\).*\([0-9]+ signed root\(s\) verified\)" \
  "... the certificates' signatures moved with them, and every segment's root signature was checked"
OUT=$("$EF" verify --db "$G" --archive "$WORK/signed.archive" --public-key "$WORK/other.key.pub" 2>&1)
expect_match "$OUT" "segment_signature_bad.*segment-000001.jsonl: signed by key [0-9a-f]{16}, which is not among --public-key" \
  "... and fails with another key, naming the file"
SEG2=$WORK/signed.archive/segment-000002.jsonl
{ head -n -1 "$SEG2"; tail -n 1 "$SEG2" | jq -c '.signature = ("0" * 128)'; } >"$WORK/resigned" && mv "$WORK/resigned" "$SEG2"
OUT=$("$EF" verify --db "$G" --archive "$WORK/signed.archive" --public-key "$WORK/archive.key.pub" 2>&1)
expect_match "$OUT" "segment-000002.jsonl: its root's signature by key [0-9a-f]{16} does not verify" \
  "a segment whose root signature was replaced fails, naming the file"

# --- 3. the ledger's triggers still refuse every other deletion ---------------
OUT=$("$SQLITE3" "$L" "DELETE FROM certificates WHERE rowid IN (SELECT rowid FROM certificates LIMIT 1)" 2>&1)
expect_match "$OUT" "certificates are immutable" "a certificate deleted by hand is refused"
OUT=$("$SQLITE3" "$L" "DELETE FROM events WHERE id IN (SELECT min(id) FROM events)" 2>&1)
expect_match "$OUT" "append-only" "an event deleted by hand is refused"
OUT=$("$SQLITE3" -bail "$L" "BEGIN; INSERT INTO archive_in_progress VALUES (1, printf('%064d', 0), 9000000000000000);
  DELETE FROM events WHERE kind = 'swept'; COMMIT;" 2>&1)
expect_match "$OUT" "append-only" "even inside a deletion window, the sweeps' events (no intent) are refused"
OUT=$("$SQLITE3" -bail "$L" "BEGIN; INSERT INTO archive_in_progress VALUES (1, printf('%064d', 0), 0);
  DELETE FROM events WHERE id = (SELECT max(id) FROM events WHERE intent IS NOT NULL); COMMIT;" 2>&1)
expect_match "$OUT" "append-only" "inside a deletion window, rows newer than its cutoff are refused"
expect_eq "$(q "$L" "SELECT count(*) FROM archive_in_progress")" 0 "... and the window closes with the failed transaction"
OUT=$("$SQLITE3" "$L" "INSERT INTO archives (segment, ledger_id, file, root, before_ms, certificates, signatures,
  events, clears, archived_at) VALUES (6, printf('%032d', 0), 'x', printf('%064d', 0), 0, 0, 0, 0, 0, 0)" 2>&1)
expect_match "$OUT" "recorded only by effectfence archive" "an archive record inserted by hand is refused"
q "$L" "INSERT INTO archive_in_progress VALUES (1, printf('%064d', 0), 0)"
verify_archive "$L" "$A"
expect_eq "$RC" 1 "a deletion window left open by hand fails verify"
expect_match "$OUT" "archive_window_open" "... as archive_window_open"
q "$L" "DROP TRIGGER archive_in_progress_recorded; DELETE FROM archive_in_progress;"
verify_archive "$L" "$A"
expect_match "$OUT" "trigger archive_in_progress_recorded on archive_in_progress was dropped" \
  "a dropped archive trigger is reported"

# --- 4. results that still replay are never archived ---------------------------
R=$WORK/replay.sqlite
EFFECTFENCE_RESULT_TTL_SECS=3600 pairs "$R" --pairs 20 --prefix k >/dev/null
sleep 0.2
OUT=$(EFFECTFENCE_RESULT_TTL_SECS=3600 "$EF" archive --db "$R" --before "$(now_iso)" --out "$WORK/replay.archive" --json)
expect_eq "$(jq -r '.certificates' <<<"$OUT")" 0 "intents whose results replay within the TTL are not archived"
OUT=$(EFFECTFENCE_RESULT_TTL_SECS=3600 pairs "$R" --prepare k-7)
expect_match "$OUT" '"status":"(replay|replayed|already_done|done)"' "a late duplicate still gets the replay ($OUT)"
expect_eq "$(q "$R" "SELECT count(*) FROM certificates WHERE intent LIKE 'k-%'")" 20 "... their certificates stay"
"$EF" export --db "$R" --out "$WORK/replay.jsonl" >/dev/null 2>&1
OUT=$("$EF" verify --export "$WORK/replay.jsonl" --archive "$A" 2>&1)
expect_match "$OUT" "segment_unrecorded.*holds 5 segment\(s\), but the dump's ledger had archived nothing" \
  "another ledger's segments under the dump of a ledger that never archived fail"
# Negative control: on a ledger whose TTL is short they are swept, archived,
# and the next prepare of one is fresh.
R2=$WORK/replay-short.sqlite
old_history "$R2" 20 k
OUT=$("$EF" archive --db "$R2" --before "$CUTOFF" --out "$WORK/replay-short.archive" --json)
expect_eq "$(jq -r '.certificates' <<<"$OUT")" 20 "past the TTL (swept), the same intents are archived"
OUT=$(pairs "$R2" --prepare k-7)
expect_match "$OUT" '"status":"fresh"' "... and a prepare of one is fresh, as after any sweep ($OUT)"

# --- 5. serve keeps answering while an archive runs -------------------------------
S=$WORK/serve.sqlite
old_history "$S" 600 s
pairs "$S" --seconds 600 --stop-file "$WORK/stop" --prefix live >"$WORK/live.json" &
LIVE=$!
sleep 1
START=$(date +%s%N)
OUT=$("$EF" archive --db "$S" --before "$CUTOFF" --out "$WORK/serve.archive" --rows 30 --json 2>&1)
ARCHIVE_MS=$(( ($(date +%s%N) - START) / 1000000 ))
expect_eq "$(jq -r '.certificates' <<<"$OUT")" 600 "archive ran beside a busy server ($ARCHIVE_MS ms, $(jq -r .segments <<<"$OUT") segments)"
kill -0 "$LIVE" 2>/dev/null
expect_eq "$?" 0 "the server was still being driven when the archive finished"
touch "$WORK/stop"
wait "$LIVE"
LIVE_OUT=$(cat "$WORK/live.json")
expect_match "$LIVE_OUT" '"anomalies":0' "every prepare and commit during the archive was answered correctly ($LIVE_OUT)"
expect_no_match "$LIVE_OUT" '"committed":0,' "the server committed pairs while the archive ran"
verify_archive "$S" "$WORK/serve.archive"
expect_eq "$RC" 0 "verify --archive passes after archiving under load ($OUT)"

# --- 6. SIGKILL at random points never loses a row --------------------------------
K=$WORK/kill.sqlite
KA=$WORK/kill.archive
old_history "$K" 500 x
EVERYTHING=$(keys "$K")
# How long a whole archive of it takes, on a copy: the kills fall anywhere in that.
"$SQLITE3" "$K" ".backup $WORK/timing.sqlite"
START=$(date +%s%N)
"$EF" archive --db "$WORK/timing.sqlite" --before "$CUTOFF" --out "$WORK/timing.archive" --rows 25 >/dev/null 2>&1
SPAN_MS=$(( ($(date +%s%N) - START) / 1000000 ))
lost=0
unverified=0
pending=0
for i in $(seq 1 "$KILLS"); do
  "$EF" archive --db "$K" --before "$CUTOFF" --out "$KA" --rows 25 >/dev/null 2>&1 &
  victim=$!
  delay=$(( (RANDOM * 32768 + RANDOM) % (SPAN_MS + 1) ))
  sleep "$((delay / 1000)).$(printf '%03d' $((delay % 1000)))"
  kill -9 "$victim" 2>/dev/null
  wait "$victim" 2>/dev/null
  # Every row is in the ledger or in a segment the ledger records.
  missing=$(comm -23 <(echo "$EVERYTHING") <(keys "$K" "$KA" | sort -u) | wc -l)
  [[ "$missing" -eq 0 ]] || { lost=$((lost + 1)); echo "kill $i: $missing row(s) lost" >&2; }
  verify_archive "$K" "$KA"
  [[ "$RC" -eq 0 ]] || { unverified=$((unverified + 1)); echo "kill $i: verify: $OUT" >&2; }
  grep -q "left by an interrupted archive" <<<"$OUT" && pending=$((pending + 1))
done
expect_eq "$lost" 0 "$KILLS SIGKILLs of archive at random points (0 to $SPAN_MS ms, a whole run's length) lost no row"
expect_match "$(q "$K" "SELECT count(*) FROM archives")" '^[1-9]' "the killed runs got segments recorded between the kills"
expect_eq "$unverified" 0 "verify --archive passed after each of them ($pending left a written, unrecorded segment)"
OUT=$("$EF" archive --db "$K" --before "$CUTOFF" --out "$KA" --rows 25 --json 2>&1)
expect_eq "$(keys "$K" "$KA")" "$EVERYTHING" "an archive run to the end after the kills holds every row exactly once"
expect_eq "$(q "$K" "SELECT count(*) FROM certificates WHERE intent LIKE 'x-%' AND intent NOT LIKE 'x-new-%'")" 0 \
  "... and has moved all the old ones out"
expect_eq "$(ls "$KA" | grep -c '\.tmp$')" 0 "no temporary file is left after it"
verify_archive "$K" "$KA"
expect_eq "$RC" 0 "verify --archive passes at the end ($OUT)"
# What an interrupted run leaves, made by hand: the next run removes it.
N=$(q "$K" "SELECT max(segment) FROM archives")
NEXT=$(printf 'segment-%06d.jsonl' $((N + 1)))
cp "$KA/segment-000001.jsonl" "$KA/$NEXT.tmp"
verify_archive "$K" "$KA"
expect_eq "$RC" 0 "a temporary file is ignored by verify"
cp "$KA/segment-000001.jsonl" "$KA/$NEXT"
verify_archive "$K" "$KA"
expect_eq "$RC" 1 "an unrecorded next segment whose rows are not in the ledger fails"
expect_match "$OUT" "$NEXT is not recorded by the ledger, yet rows in it are no longer in the ledger" "... naming it"
OUT=$("$EF" archive --db "$K" --before "$CUTOFF" --out "$KA" --json 2>&1)
expect_eq "$(jq -c '[.removed_unrecorded, .removed_temporary]' <<<"$OUT")" "[1,1]" \
  "the next archive removes what an interrupted one leaves"
verify_archive "$K" "$KA"
expect_eq "$RC" 0 "and verify --archive passes again"

# The state a crash between the segment's rename and its transaction leaves,
# made exactly: the ledger as it was before (a backup), and the segment file.
P=$WORK/pending.sqlite
old_history "$P" 30 p
"$SQLITE3" "$P" ".backup $WORK/pending-crashed.sqlite"
"$EF" archive --db "$P" --before "$CUTOFF" --out "$WORK/pending.archive" --rows 1000 --segments 1 >/dev/null
verify_archive "$WORK/pending-crashed.sqlite" "$WORK/pending.archive"
expect_eq "$RC" 0 "a written segment whose transaction never committed passes verify: its rows are all in the ledger"
expect_match "$OUT" "1 left by an interrupted archive" "... and verify says so"
OUT=$("$EF" archive --db "$WORK/pending-crashed.sqlite" --before "$CUTOFF" --out "$WORK/pending.archive" --json 2>&1)
expect_eq "$(jq -c '[.removed_unrecorded, .segments, .certificates]' <<<"$OUT")" "[1,1,30]" \
  "the next archive removes it and archives those rows again"
verify_archive "$WORK/pending-crashed.sqlite" "$WORK/pending.archive"
expect_eq "$RC" 0 "... and verify --archive passes"

# --- 7. bad input gets a named error --------------------------------------------
OUT=$("$EF" archive --db "$WORK/none.sqlite" --before 1d --out "$WORK/x" 2>&1)
expect_match "$OUT" "effectfence archive: opening the ledger: no ledger at" "a missing ledger is named, not created"
OUT=$("$EF" archive --db "$L" --before soon --out "$WORK/x" 2>&1)
expect_match "$OUT" "effectfence archive: reading options: --before" "a bad --before is named"
OUT=$("$EF" archive --db "$L" --before 1d --out "$WORK/elsewhere" 2>&1)
expect_match "$OUT" "does not hold segment-000005.jsonl, the last segment this ledger recorded" \
  "an archive directory that is not the ledger's is refused"
OUT=$("$EF" archive --db "postgresql://nobody@/none?host=$WORK/no-server" --before 1d --out "$WORK/x" 2>&1)
expect_match "$OUT" "effectfence archive: opening the ledger: .*Is the server running" \
  "a PostgreSQL server that is not there is named (archive_postgres_test.sh archives a real one)"
# A second committed event written by hand, its detail not even JSON: the
# archive neither fails on it nor moves that intent out of verify's sight.
J=$WORK/junk.sqlite
old_history "$J" 5 j
ROW=$(q "$J" "SELECT intent_id FROM swept_intents WHERE intent = 'j-0'")
"$SQLITE3" "$J" "INSERT INTO events (at, kind, intent, intent_id, domain, seq, generation, actor, detail)
                 VALUES (1, 'committed', 'j-0', $ROW, 'x', 1, 1, 'operator', '{not json')"
OUT=$("$EF" archive --db "$J" --before "$CUTOFF" --out "$WORK/junk.archive" --json 2>&1)
expect_eq "$(jq -c '[.certificates, .events, .kept_for_history]' <<<"$OUT" 2>/dev/null)" "[4,8,1]" \
  "an event whose detail is not JSON does not stop the archive, and its intent stays ($OUT)"
verify_archive "$J" "$WORK/junk.archive"
expect_eq "$RC" 1 "verify --archive still fails the forged history"
expect_match "$OUT" "impossible_history: intent 'j-0': committed event" "... naming the intent it left in the ledger"
OUT=$("$EF" archive --db "$J" --before "$CUTOFF" --out "$WORK/junk.archive" 2>&1)
expect_match "$OUT" "kept 1 intent\\(s\\) in the ledger whose events break the state machine" \
  "a later archive keeps it too, and says so"

finish
