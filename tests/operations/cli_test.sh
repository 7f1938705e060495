#!/usr/bin/env bash
# The operator subcommands (stats, fenced, clear, export, verify) against a
# real ledger written by the fence, checked with the sqlite3 shell, jq and
# sha256sum rather than with effectfence's own code.
#
# usage: cli_test.sh EFFECTFENCE OPS_LEDGER_FIXTURE SQLITE3
set -uo pipefail

EF=$(realpath "$1")
FIXTURE=$(realpath "$2")
SQLITE3=$(realpath "$3")
source "$(dirname "$0")/lib.sh"
MIGRATIONS_DIR=$(cd "$(dirname "$0")/../../migrations" && pwd)
command -v jq >/dev/null || { echo "FAIL: jq is needed to read effectfence's JSON output" >&2; exit 1; }

LEDGER=$WORK/ledger.sqlite
cd "$WORK"

# run CMD...: sets OUT, ERR, RC.
run() {
  "$@" >"$WORK/out" 2>"$WORK/err"
  RC=$?
  OUT=$(cat "$WORK/out")
  ERR=$(cat "$WORK/err")
}

fingerprint() { "$SQLITE3" -batch "$1" ".timeout 5000" ".dump" | sha256sum | cut -c1-64; }
state_of() { q "$LEDGER" "SELECT state FROM intents WHERE intent = '$1'"; }
cert_of() { q "${2:-$LEDGER}" "SELECT hash FROM certificates WHERE intent = '$1'"; }

# A copy of the ledger with its certificate triggers dropped, to tamper with.
tampered_copy() {
  local copy=$WORK/$1
  rm -f "$copy"
  "$SQLITE3" -batch "$LEDGER" ".timeout 5000" ".backup $copy"
  echo "$copy"
}

# tamper COPY SQL TRIGGER...: runs SQL on COPY past the named triggers, then
# puts them back as effectfence built them, so verify judges the rows alone.
CERTIFICATE_TRIGGERS="certificates_immutable_update certificates_immutable_delete"
tamper() {
  local copy=$1 sql=$2 names restore
  shift 2
  names=$(printf "'%s'," "$@")
  restore=$(q "$LEDGER" "SELECT group_concat(sql, ';' || char(10)) || ';' FROM sqlite_master
                         WHERE type = 'trigger' AND name IN (${names%,})")
  q "$copy" "$(printf 'DROP TRIGGER %s; ' "$@") $sql; $restore"
}

"$FIXTURE" populate "$LEDGER" || { fail "could not write the ledger"; finish; exit 1; }

# An attempt left in flight by a process that was killed: any read-write
# opening of the ledger on this host would reap it (move it to unknown).
coproc SESSION { exec "$FIXTURE" session "$LEDGER"; }
# Bash unsets SESSION and SESSION_PID as soon as it reaps the coprocess, so
# the pid is kept, and the killed process's status is read with no variable.
session_pid=$SESSION_PID
read -r -t 60 ready <&"${SESSION[0]}" || true
echo "prepare payout:batch-9" >&"${SESSION[1]}"
read -r -t 60 admitted <&"${SESSION[0]}" || true
expect_eq "$ready $admitted" "ready admitted" "a holder admits payout:batch-9"
kill -KILL "$session_pid"
wait "$session_pid" 2>/dev/null || true
expect_eq "$(state_of payout:batch-9)" "in_flight" "its holder is dead, its attempt still in flight"

# A log holding a transaction (copied while its connection is open, as a
# server stopped hard leaves one) beside an emptied or missing ledger: a
# reader refuses it before SQLite would delete the log.
q "$LEDGER" ".backup '$WORK/logged.sqlite'" >/dev/null
"$SQLITE3" "$WORK/logged.sqlite" "PRAGMA wal_autocheckpoint = 0" "CREATE TABLE scratch(x)" \
  ".shell cp '$WORK/logged.sqlite-wal' '$WORK/orphan.sqlite-wal'" >/dev/null
rm -f "$WORK"/logged.sqlite*
WAL_BYTES=$(stat -c %s "$WORK/orphan.sqlite-wal")
expect_eq "$((WAL_BYTES > 32))" 1 "the copied log holds a transaction"
: >"$WORK/orphan.sqlite"
run "$EF" stats --db "$WORK/orphan.sqlite"
expect_match "$RC $ERR" "^2 effectfence stats: opening the ledger: $WORK/orphan.sqlite: the ledger is empty, but its log $WORK/orphan.sqlite-wal holds $WAL_BYTES bytes of transactions" \
  "a reader refuses an emptied ledger whose -wal holds transactions"
rm "$WORK/orphan.sqlite"
run "$EF" fenced --db "$WORK/orphan.sqlite"
expect_match "$RC $ERR" "^2 .*the ledger does not exist, but its log" "and a missing one"
expect_eq "$(stat -c %s "$WORK/orphan.sqlite-wal") $(ls "$WORK" | grep -c '^orphan.sqlite$')" "$WAL_BYTES 0" \
  "the log is kept as it was, and no ledger is created"
rm "$WORK/orphan.sqlite-wal"

# A log holding transactions, one byte of its first frame changed: SQLite
# would read none of them and say nothing. Readers and servers refuse it.
q "$LEDGER" ".backup '$WORK/logged.sqlite'" >/dev/null
"$SQLITE3" "$WORK/logged.sqlite" "PRAGMA wal_autocheckpoint = 0" "CREATE TABLE scratch(x)" \
  "INSERT INTO scratch VALUES (1)" "INSERT INTO scratch VALUES (2)" "INSERT INTO scratch VALUES (3)" \
  ".shell cp '$WORK/logged.sqlite' '$WORK/damaged.sqlite'; cp '$WORK/logged.sqlite-wal' '$WORK/damaged.sqlite-wal'" \
  >/dev/null
rm -f "$WORK"/logged.sqlite*
printf '\x55' | dd of="$WORK/damaged.sqlite-wal" bs=1 seek=$((32 + 24 + 100)) conv=notrunc status=none
WAL_SUM=$(sha256sum <"$WORK/damaged.sqlite-wal")
run "$EF" verify --db "$WORK/damaged.sqlite"
expect_match "$RC $ERR" "^2 effectfence verify: opening the ledger: $WORK/damaged.sqlite: its log $WORK/damaged.sqlite-wal is damaged at byte 32: SQLite would read 0 transaction\(s\) from it and silently drop the 4 committed after the damage" \
  "verify refuses a ledger whose -wal is damaged before later commits, and counts them"
run "$EF" serve --db "$WORK/damaged.sqlite" </dev/null
expect_match "$RC $ERR" "^[1-9][0-9]* .*corrupt.*damaged.sqlite-wal is damaged at byte 32" "serve refuses it as corrupt"
expect_eq "$(sha256sum <"$WORK/damaged.sqlite-wal")" "$WAL_SUM" "the damaged log is kept byte for byte"
# OPERATIONS.md's way to keep what comes before the damage.
"$SQLITE3" "$WORK/damaged.sqlite" "PRAGMA wal_checkpoint(TRUNCATE)" >/dev/null
run "$EF" verify --db "$WORK/damaged.sqlite"
expect_eq "$RC $(q "$WORK/damaged.sqlite" "SELECT count(*) FROM sqlite_master WHERE name = 'scratch'")" "0 0" \
  "after the checkpoint the ledger before the damage verifies, and what came after is gone"
rm -f "$WORK"/damaged.sqlite*

# A log whose header is sound but of another format version: SQLite refuses
# it only as "unable to open database file". Readers name the log instead.
q "$LEDGER" ".backup '$WORK/logged.sqlite'" >/dev/null
"$SQLITE3" "$WORK/logged.sqlite" "PRAGMA wal_autocheckpoint = 0" "CREATE TABLE scratch(x)" \
  ".shell cp '$WORK/logged.sqlite' '$WORK/foreign.sqlite'; cp '$WORK/logged.sqlite-wal' '$WORK/foreign.sqlite-wal'" \
  >/dev/null
rm -f "$WORK"/logged.sqlite*
# Format 3007001 in bytes 4-7, and the header's checksum (bytes 24-31) over it.
perl -e '
  open(my $f, "+<:raw", $ARGV[0]) or die; read($f, my $h, 32) == 32 or die;
  substr($h, 4, 4) = pack("N", 3007001);
  my $order = (unpack("N", $h) & 1) ? "N" : "V";
  my ($s0, $s1) = (0, 0);
  for my $i (0, 8, 16) {
    my ($x0, $x1) = unpack("$order$order", substr($h, $i, 8));
    $s0 = ($s0 + $x0 + $s1) & 0xffffffff; $s1 = ($s1 + $x1 + $s0) & 0xffffffff;
  }
  substr($h, 24, 8) = pack("NN", $s0, $s1);
  seek($f, 0, 0); print $f $h; close($f) or die;' "$WORK/foreign.sqlite-wal"
WAL_SUM=$(sha256sum <"$WORK/foreign.sqlite-wal")
run "$EF" export --db "$WORK/foreign.sqlite"
expect_match "$RC $ERR" "^2 effectfence export: opening the ledger: $WORK/foreign.sqlite: its log $WORK/foreign.sqlite-wal is in write-ahead-log format 3007001" \
  "a reader names a log of another format version, not a permissions problem"
run "$EF" serve --db "$WORK/foreign.sqlite" </dev/null
expect_match "$RC $ERR" "^2 .*newer_schema.*foreign.sqlite-wal is in write-ahead-log format 3007001" \
  "serve refuses it by name"
expect_eq "$(sha256sum <"$WORK/foreign.sqlite-wal")" "$WAL_SUM" "the log is kept byte for byte"
rm -f "$WORK"/foreign.sqlite*

# A PostgreSQL key=value connection string is no file name: refused, its
# password hidden, and no file of that name created.
run "$EF" stats --db "host=/nonexistent user=fence password=KvSecret77 dbname=ledger"  # in $WORK
expect_match "$RC $ERR" "^2 .*key=value connection string" "a reader refuses a key=value connection string"
expect_eq "$(grep -c KvSecret77 <<<"$OUT$ERR") $(ls "$WORK" | grep -c '^host=')" "0 0" "its password is hidden, and no file made"

echo "--- help and usage"
for cmd in stats fenced clear export verify; do
  run "$EF" "$cmd" --help
  expect_eq "$RC" 0 "$cmd --help exits 0"
  expect_match "$OUT" "^usage: effectfence $cmd " "$cmd --help prints its usage"
  run "$EF" "$cmd" --db "$LEDGER" --bogus
  expect_eq "$RC" 2 "$cmd refuses an unknown option"
  expect_match "$ERR" "^effectfence $cmd: reading options: unknown option '--bogus'" "$cmd names the bad option"
done
run "$EF" export --db "$LEDGER" --format xml
expect_eq "$RC $ERR" "2 effectfence export: reading options: --format must be jsonl or csv, not 'xml'" "export refuses an unknown format"
run "$EF" export --db "$LEDGER" --since yesterday
expect_eq "$RC" 2 "export refuses a bad --since"
run "$EF" verify --db "$LEDGER" --limit 0
expect_eq "$RC" 2 "verify refuses --limit 0"
run "$EF" verify --db "$LEDGER" --export x.jsonl
expect_eq "$RC" 2 "verify refuses --db with --export"
run "$EF" clear --db "$LEDGER" charge:order-124
expect_eq "$RC $ERR" "2 effectfence clear: reading options: --reason is required, and not blank: it goes in the audit log" "clear needs a reason"
run "$EF" clear --db "$LEDGER" charge:order-124 --reason "  "
expect_eq "$RC $ERR" "2 effectfence clear: reading options: --reason is required, and not blank: it goes in the audit log" \
  "clear needs a reason that is not blank"
run "$EF" clear --db "$LEDGER" charge:order-124 --reason "checked" --operator " "
expect_eq "$RC $ERR" "2 effectfence clear: reading options: --operator may not be blank: it goes in the audit log" \
  "clear needs an operator that is not blank"
run "$EF" clear --db "$LEDGER" --reason "x"
expect_eq "$RC" 2 "clear needs an intent"

echo "--- a missing ledger is an error, never a new file"
# ... that names the files beside it, a likely typo ($LEDGER is the only one in
# $WORK); only in the default place are they called wrap's ledgers.
BESIDE="; other .sqlite files in that directory: $LEDGER"
for cmd in stats fenced export verify; do
  run "$EF" "$cmd" --db "$WORK/missing.sqlite"
  expect_eq "$RC $ERR" "2 effectfence $cmd: opening the ledger: no ledger at $WORK/missing.sqlite$BESIDE" "$cmd on a missing ledger"
done
run "$EF" clear --db "$WORK/missing.sqlite" charge:order-124 --reason x
expect_eq "$RC $ERR" "2 effectfence clear: opening the ledger: no ledger at $WORK/missing.sqlite$BESIDE" "clear on a missing ledger"
run env EFFECTFENCE_LEDGER="$WORK/from-env.sqlite" "$EF" stats
expect_eq "$ERR" "effectfence stats: opening the ledger: no ledger at $WORK/from-env.sqlite$BESIDE" "--db falls back to EFFECTFENCE_LEDGER"
run env -u EFFECTFENCE_LEDGER XDG_STATE_HOME="$WORK/state" "$EF" fenced
expect_eq "$ERR" "effectfence fenced: opening the ledger: no ledger at $WORK/state/effectfence/server.sqlite" \
  "then to the default server ledger"
expect_eq "$(ls "$WORK" | grep -Ec '^(missing|from-env)|^state$')" 0 "no file or directory was created"
# The default ledger exists, and wrap's ledgers lie beside it: the operator
# is told, since the activity may be in one of those.
mkdir -p "$WORK/state-with-wrap/effectfence"
q "$LEDGER" ".backup '$WORK/state-with-wrap/effectfence/server.sqlite'"
q "$LEDGER" ".backup '$WORK/state-with-wrap/effectfence/wrap-0123abcd.sqlite'"
run env -u EFFECTFENCE_LEDGER XDG_STATE_HOME="$WORK/state-with-wrap" "$EF" stats --json
expect_eq "$RC $ERR" "0 effectfence stats: note: reading the default ledger $WORK/state-with-wrap/effectfence/server.sqlite; other ledgers in that directory: $WORK/state-with-wrap/effectfence/wrap-0123abcd.sqlite (wrap keeps one per wrapped command; pass one with --db)" \
  "stats on the default ledger names the wrap ledgers beside it"
expect_eq "$(jq -r .ledger.admitted <<<"$OUT" | grep -c '^[0-9]')" 1 "and its JSON on stdout is unchanged"
run "$EF" stats --db "$WORK/state-with-wrap/effectfence/server.sqlite"
expect_eq "$RC $ERR" "0 " "a ledger named with --db gets no note"
"$SQLITE3" "$WORK/other.sqlite" "CREATE TABLE t(x)"
run "$EF" stats --db "$WORK/other.sqlite"
expect_match "$RC $ERR" "^2 .*other.sqlite is not an effectfence ledger" "stats refuses another application's database"
echo "not a database at all, just some text that is long enough to look like a header" >"$WORK/text.sqlite"
run "$EF" verify --db "$WORK/text.sqlite"
expect_match "$RC $ERR" "^2 effectfence verify: opening the ledger: .*text.sqlite" "verify refuses a file that is not a database"
# A report that cannot be written is a failure, not an empty success.
for cmd in stats fenced verify; do
  "$EF" "$cmd" --db "$LEDGER" >/dev/full 2>"$WORK/full.err"
  expect_eq "$? $(cat "$WORK/full.err")" \
    "2 effectfence $cmd: writing to standard output: No space left on device" \
    "$cmd fails when its output cannot be written"
done
# Started with stdout closed, a report would go nowhere: the same failure,
# named; export refuses before it reads the ledger, and --out still works.
for cmd in stats fenced verify; do
  "$EF" "$cmd" --db "$LEDGER" >&- 2>"$WORK/closed.err"
  expect_eq "$? $(cat "$WORK/closed.err")" \
    "2 effectfence $cmd: writing to standard output: it was closed when effectfence started (run it with stdout open, or give --out where the command has it)" \
    "$cmd fails when stdout was closed"
done
# A clear lets the effect run again: with nowhere to report it, it is not made.
"$EF" clear --db "$LEDGER" charge:order-124 --reason "checked" >&- 2>"$WORK/closed.err"
expect_eq "$? $(cat "$WORK/closed.err")" \
  "2 effectfence clear: writing to standard output: it was closed when effectfence started (run it with stdout open, or give --out where the command has it); nothing was cleared" \
  "clear with stdout closed refuses"
expect_eq "$(state_of charge:order-124)" "failed" "and clears nothing"
"$EF" export --db "$LEDGER" >&- 2>"$WORK/closed.err"
expect_eq "$? $(cat "$WORK/closed.err")" \
  "2 effectfence export: writing to standard output: it was closed when effectfence started (run it with stdout open, or give --out where the command has it)" \
  "export to a closed stdout fails"
"$EF" export --db "$LEDGER" --out "$WORK/closed-out.jsonl" >&- 2>/dev/null
expect_eq "$? $(tail -n +2 "$WORK/closed-out.jsonl" | wc -l)" \
  "0 $(q "$LEDGER" "SELECT (SELECT count(*) FROM certificates) + (SELECT count(*) FROM events) + 1")" \
  "export --out works with stdout closed"
"$EF" --version >&- 2>"$WORK/closed.err"
expect_match "$? $(cat "$WORK/closed.err")" "^2 effectfence --version: writing to standard output: it was closed" "--version too"
# Read at schema version 0, a ledger would be held to no protections at all.
q "$LEDGER" ".backup '$WORK/reset.sqlite'" >/dev/null
q "$WORK/reset.sqlite" "DROP TRIGGER events_append_only_delete; PRAGMA user_version = 0" >/dev/null
for cmd in verify stats fenced export; do
  run "$EF" "$cmd" --db "$WORK/reset.sqlite"
  expect_match "$RC $ERR" "^2 .*reset.sqlite holds a ledger's tables but its schema version was set to 0" \
    "$cmd refuses a ledger whose schema version was set to 0"
done

echo "--- auditing never writes"
BEFORE=$(fingerprint "$LEDGER")
for cmd in stats fenced export verify; do
  run "$EF" "$cmd" --db "$LEDGER"
  expect_eq "$RC" 0 "$cmd runs on the ledger"
done
expect_eq "$(fingerprint "$LEDGER")" "$BEFORE" "stats, fenced, export and verify leave the ledger as it was"
expect_eq "$(state_of payout:batch-9)" "in_flight" "and did not open it for writing (the dead holder was not reaped)"

# A reader who may not write the ledger's directory (an auditor, a backup on
# read-only media) is told what to do when no process has the ledger open.
RO=$WORK/readonly
mkdir -p "$RO" && cp "$LEDGER" "$RO/ledger.sqlite" && chmod 644 "$RO/ledger.sqlite" && chmod 555 "$RO"
chmod 711 "$WORK"
AS_READER=()
if [[ $(id -u) == 0 ]]; then AS_READER=(setpriv --reuid=65534 --regid=65534 --clear-groups); fi
for cmd in stats verify; do
  run "${AS_READER[@]}" "$EF" "$cmd" --db "$RO/ledger.sqlite"
  expect_eq "$RC" 2 "$cmd cannot read a ledger whose directory it may not write while nobody has it open"
  expect_match "$ERR" "cannot read $RO/ledger.sqlite as this user: no process has it open, so SQLite must create $RO/ledger.sqlite-shm to read it, and $RO is not writable\\. .*read a copy .*: mkdir -p /tmp/ledger-copy && cp $RO/ledger.sqlite " \
    "$cmd says why, and how to read it anyway"
done
# A ledger on read-only media (a mounted snapshot) is read in place when its
# log is empty; when it holds commits, the reader is told to read a copy,
# not to run as the owner or beside a server, which cannot help there.
ROFS=$WORK/rofs
mkdir -p "$ROFS"
if mount -t tmpfs -o size=8m tmpfs "$ROFS" 2>/dev/null; then
  SNAP="$ROFS/snap shot %41#?é"  # characters a file: URI must escape
  mkdir "$SNAP" "$ROFS/logged"
  q "$LEDGER" ".backup '$SNAP/ledger.sqlite'" >/dev/null
  q "$LEDGER" ".backup '$ROFS/logged/ledger.sqlite'" >/dev/null
  # Copied while a connection still has commits in the log, as a snapshot of a live ledger would be.
  mkdir "$WORK/logged"
  "$SQLITE3" "$ROFS/logged/ledger.sqlite" "PRAGMA wal_autocheckpoint = 0" "CREATE TABLE scratch(x)" \
    ".shell cp '$ROFS/logged/ledger.sqlite' '$ROFS/logged/ledger.sqlite-wal' '$WORK/logged/'" >/dev/null
  cp "$WORK/logged/ledger.sqlite" "$WORK/logged/ledger.sqlite-wal" "$ROFS/logged/"
  mount -o remount,ro "$ROFS"
  for cmd in stats verify; do
    run "$EF" "$cmd" --db "$SNAP/ledger.sqlite"
    expect_eq "$RC" 0 "$cmd reads a ledger on a read-only filesystem in place"
  done
  run "$EF" export --db "$SNAP/ledger.sqlite"
  expect_eq "$RC $(tail -n +2 <<<"$OUT" | wc -l)" \
    "0 $(q "$LEDGER" "SELECT (SELECT count(*) FROM certificates) + (SELECT count(*) FROM events) + 1")" "export dumps it all"
  run "$EF" stats --db "$ROFS/logged/ledger.sqlite"
  expect_eq "$RC $ERR" "2 effectfence stats: opening the ledger: cannot read $ROFS/logged/ledger.sqlite in place: it is on a read-only filesystem, and its -wal holds commits that only a -shm file (which cannot be created there) lets SQLite read. Read a copy, with its -wal: mkdir -p /tmp/ledger-copy && cp $ROFS/logged/ledger.sqlite $ROFS/logged/ledger.sqlite-wal /tmp/ledger-copy/" \
    "with commits in its log, the reader is told to read a copy"
  umount "$ROFS"
else
  echo "skipped: reading a ledger on a read-only filesystem (this user cannot mount a tmpfs)"
fi
# Read-only here, written through another mount (a read-only bind mount of a
# live directory): a change while it is read in place fails the command.
RWSIDE=$WORK/rw-side ROSIDE=$WORK/ro-side
mkdir -p "$RWSIDE" "$ROSIDE"
if mount -t tmpfs -o size=64m tmpfs "$RWSIDE" 2>/dev/null; then
  if mount --bind "$RWSIDE" "$ROSIDE" 2>/dev/null && mount -o remount,bind,ro "$ROSIDE" 2>/dev/null; then
    "$FIXTURE" bulk "$RWSIDE/live.sqlite" 2000
    mkfifo "$WORK/live.fifo"
    "$EF" export --db "$ROSIDE/live.sqlite" >"$WORK/live.fifo" 2>"$WORK/live.err" &
    EXPORT_PID=$!
    exec 3<"$WORK/live.fifo"
    head -c 1 <&3 >/dev/null  # it has opened the ledger and is writing; the pipe fills and holds it
    q "$RWSIDE/live.sqlite" "CREATE TABLE scratch(x); DROP TABLE scratch" >/dev/null
    cat <&3 >/dev/null
    exec 3<&-
    wait "$EXPORT_PID"
    expect_match "$? $(cat "$WORK/live.err")" \
      "^2 .*effectfence export: reading the ledger: $ROSIDE/live.sqlite changed while it was read in place from a read-only mount" \
      "a ledger written through another mount while it is read in place fails the read"
    # The same to --out: the dump of no one state is not put in place of the
    # last good one. The export is stopped once its dump file is open (the
    # read has just begun), the ledger is written, and the export goes on.
    "$FIXTURE" bulk "$RWSIDE/big.sqlite" 20000
    echo "the last good dump" >"$WORK/big.jsonl"
    "$EF" export --db "$ROSIDE/big.sqlite" --out "$WORK/big.jsonl" 2>"$WORK/big.err" &
    EXPORT_PID=$!
    for _ in $(seq 1000); do
      compgen -G "$WORK/big.jsonl.partial-*" >/dev/null && break
      sleep 0.01
    done
    kill -STOP "$EXPORT_PID"
    q "$RWSIDE/big.sqlite" "CREATE TABLE scratch(x); DROP TABLE scratch" >/dev/null
    kill -CONT "$EXPORT_PID"
    wait "$EXPORT_PID"
    expect_match "$? $(cat "$WORK/big.err")" \
      "^2 .*effectfence export: reading the ledger: $ROSIDE/big.sqlite changed while it was read in place" \
      "an export to --out of a ledger written while it is read in place fails"
    expect_eq "$(cat "$WORK/big.jsonl") $(compgen -G "$WORK/big.jsonl.partial-*" | wc -l)" "the last good dump 0" \
      "and leaves the earlier dump as it was, with no partial dump behind"
    umount "$ROSIDE"
  else
    echo "skipped: a ledger changed while read in place (this user cannot make a read-only bind mount)"
  fi
  umount "$RWSIDE"
fi
# A full filesystem: serve refuses at open, saying so, instead of answering
# initialize and failing at its first write.
FULL=$WORK/full
mkdir -p "$FULL"
if mount -t tmpfs -o size=2m tmpfs "$FULL" 2>/dev/null; then
  q "$LEDGER" ".backup '$FULL/ledger.sqlite'" >/dev/null
  dd if=/dev/zero of="$FULL/filler" bs=64k status=none 2>/dev/null || true
  run "$EF" serve --db "$FULL/ledger.sqlite" </dev/null
  expect_match "$RC [$OUT] $ERR" "^2 \\[\\] .*the filesystem holding it has [0-9]+ bytes free, too little to record decisions" \
    "a server refuses a ledger on a full filesystem at open, saying so"
  umount "$FULL"
else
  echo "skipped: a full filesystem (this user cannot mount a tmpfs)"
fi
# Clearing writes: such a user is told to clear as the owner, not to clear a copy.
run "${AS_READER[@]}" "$EF" clear --db "$RO/ledger.sqlite" payout:batch-9 --reason "checked"
expect_match "$RC $ERR" "^2 effectfence clear: opening the ledger: $RO/ledger.sqlite cannot be written by this user \\(uid [0-9]+\\): clearing writes .*Run effectfence clear as the user the servers run as" \
  "clear tells a user who may not write the ledger's directory to clear as its owner"
expect_eq "$(echo "$ERR" | grep -c 'cp ')" 0 "and not to clear a copy"
# A file that is not a database, in the same place, is named as such, not as a WAL reading problem.
head -c 8192 /dev/urandom >"$WORK/garbage.sqlite" && chmod 644 "$WORK/garbage.sqlite"
chmod 755 "$RO" && mv "$WORK/garbage.sqlite" "$RO/" && chmod 555 "$RO"
run "${AS_READER[@]}" "$EF" verify --db "$RO/garbage.sqlite"
expect_match "$RC $ERR" "^2 .*garbage.sqlite: file is not a database" "a file that is not a database is named so, even where the -shm cannot be made"
chmod 755 "$RO"

echo "--- stats"
run "$EF" stats --db "$LEDGER" --json
expect_eq "$RC" 0 "stats --json runs"
expect_eq "$(jq '.ledger.total_attempts' <<<"$OUT")" \
  "$(q "$LEDGER" "SELECT sum(value) FROM counters WHERE name IN ('admitted', 'replayed') OR name LIKE 'refused_%'")" \
  "total_attempts counts every attempt"
expect_eq "$(jq '.ledger.prevented' <<<"$OUT")" \
  "$(q "$LEDGER" "SELECT sum(value) FROM counters WHERE name = 'replayed' OR name LIKE 'refused_%'")" \
  "prevented counts replays and refusals"
expect_eq "$(jq -c '[.ledger.admitted, .ledger.replayed, .ledger.refused.payload_mismatch, .ledger.committed, .ledger.aborted]' <<<"$OUT")" \
  "[14,1,1,10,2]" "stats counts what the fixture did"
expect_eq "$(jq -r '.intents | to_entries | map("\(.key)=\(.value)") | join(" ")' <<<"$OUT")" \
  "cleared=0 done=10 failed=2 in_flight=1 unknown=1" "stats counts intents by state"
expect_eq "$(jq '[.certificates, .events]' -c <<<"$OUT")" \
  "[$(q "$LEDGER" "SELECT count(*) FROM certificates"),$(q "$LEDGER" "SELECT count(*) FROM events")]" "stats counts certificates and events"
run "$EF" stats --db "$LEDGER"
expect_match "$OUT" "^prevented +6 " "stats text shows prevented"

echo "--- fenced"
run "$EF" fenced --db "$LEDGER" --json
expect_eq "$(jq -r '.fenced[].intent' <<<"$OUT" | tr '\n' ' ')" "$(q "$LEDGER" "SELECT intent FROM fenced" | tr '\n' ' ')" \
  "fenced --json lists what the fenced view lists"
expect_eq "$(jq -r '.count' <<<"$OUT")" 3 "fenced --json counts them"
expect_eq "$(jq -c '.fenced[0] | [.intent, .state, .tool, .args.order, .agent, (.reason | startswith("aborted: provider timed out"))]' <<<"$OUT")" \
  '["charge:order-124","failed","charge","124","billing-agent",true]' "fenced --json says what and why"
expect_match "$(jq -r '.fenced[0].since' <<<"$OUT")" '^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{3}Z$' \
  "fenced --json gives since in ISO-8601 UTC"
# The holder killed above: with no server running, nothing has fenced its
# attempt yet, and the view cannot tell; fenced can, and lists it apart.
expect_eq "$(jq -r '.holder_gone[].intent' <<<"$OUT")" "payout:batch-9" \
  "fenced --json lists the intent in flight whose holder on this host is gone"
expect_eq "$(jq -r '.holder_gone[0].holder' <<<"$OUT")" "$(holder_host):$session_pid" \
  "fenced --json names the holder that is gone"
run "$EF" fenced --db "$LEDGER"
expect_match "$OUT" "^3 fenced intent" "fenced text counts them"
expect_match "$OUT" "holder process on this host is gone" "fenced text lists the intent whose holder is gone"
expect_match "$OUT" "why +server shut down while the charge was running" "fenced text says why"
# A reason that is not UTF-8 (cut mid-character, or written by hand) is shown
# with U+FFFD instead of failing the whole report.
DAMAGED="$WORK/damaged.sqlite"
q "$LEDGER" ".backup '$DAMAGED'"
q "$DAMAGED" "UPDATE intents SET reason = CAST(X'616263C3' AS TEXT) WHERE intent = 'charge:order-124'" >/dev/null
run "$EF" fenced --db "$DAMAGED" --json
expect_eq "$RC" 0 "fenced --json reads a reason that is not UTF-8"
expect_eq "$(jq -r '.fenced[] | select(.intent == "charge:order-124") | .reason' <<<"$OUT")" $'abc\uFFFD' \
  "fenced --json replaces the bad byte"

# An intent still in flight past its lease (its holder runs on, or cannot be
# seen) is listed apart, with its holder, so an operator can end it.
q "$DAMAGED" "UPDATE intents SET lease_expires_at = 4102444800000 WHERE state = 'in_flight'" >/dev/null
run "$EF" fenced --db "$DAMAGED" --json
expect_eq "$(jq -c '.past_lease' <<<"$OUT")" "[]" "fenced --json lists no intent past its lease while leases are live"
tamper "$DAMAGED" "UPDATE intents SET lease_expires_at = 1000 WHERE state = 'in_flight'" intents_holder_kept >/dev/null
run "$EF" fenced --db "$DAMAGED" --json
expect_eq "$(jq -c '.past_lease' <<<"$OUT")" "[]" \
  "an intent past its lease whose holder is gone is not listed (the next call fences it unknown)"
# Now held by a process that runs: this shell.
HOLDER_HOST=$(holder_host)
HOLDER_BOOT=$(cat /proc/sys/kernel/random/boot_id)
HOLDER_STARTED=$(sed 's/.*) //' /proc/$$/stat | cut -d' ' -f20)
tamper "$DAMAGED" "UPDATE intents SET holder_host = '$HOLDER_HOST', holder_boot = '$HOLDER_BOOT', holder_pid = $$,
               holder_started = $HOLDER_STARTED WHERE state = 'in_flight'" intents_holder_kept >/dev/null
run "$EF" fenced --db "$DAMAGED" --json
expect_eq "$(jq -r '.past_lease[].intent' <<<"$OUT" | tr '\n' ' ')" \
  "$(q "$DAMAGED" "SELECT intent FROM intents WHERE state = 'in_flight' ORDER BY intent" | tr '\n' ' ')" \
  "fenced --json lists the intents in flight past their lease whose holder still runs"
expect_eq "$(jq -r '.past_lease | length' <<<"$OUT")" 1 "the fixture's intent in flight is listed"
expect_eq "$(jq -r '.past_lease[0].holder' <<<"$OUT")" "$HOLDER_HOST:$$" "fenced --json names the holder process"
run "$EF" fenced --db "$DAMAGED"
expect_match "$OUT" "still in flight past their lease" "fenced text lists intents past their lease"

# Text an agent wrote (a reason with a newline and a terminal escape) cannot
# forge another entry of the text report or hide itself.
q "$DAMAGED" "UPDATE intents SET reason = 'timeout' || char(27) || '[8m hidden' || char(10) || char(10) || 'charge:forged  [unknown since 2026-01-01]' WHERE intent = 'charge:order-124'" >/dev/null
run "$EF" fenced --db "$DAMAGED"
expect_eq "$RC" 0 "fenced reads a reason with control characters"
expect_eq "$(grep -c '^charge:forged' <<<"$OUT")" 0 "fenced text cannot be given a forged entry"
expect_eq "$(grep -c $'\e' <<<"$OUT")" 0 "fenced text carries no escape character"
expect_match "$OUT" 'why +timeout\\x1b\[8m hidden\\x0a\\x0acharge:forged' "fenced text shows the control characters escaped"
run "$EF" clear --db "$DAMAGED" charge:order-124 --operator $'eve\e]0;owned\a' --reason $'checked\e[2J'
expect_eq "$RC $OUT" '0 cleared charge:order-124 (was failed) by eve\x1b]0;owned\x07: checked\x1b[2J' \
  "clear prints the operator and reason it recorded with their control characters escaped"

echo "--- clear"
# An intent whose name holds control characters is printed escaped; clear
# takes that printed form back, and refuses when it names two intents.
q "$LEDGER" ".backup '$WORK/escaped.sqlite'" >/dev/null
copy_fenced() {  # copy_fenced NAME-SQL: another unknown intent like charge:order-125, named NAME-SQL
  q "$WORK/escaped.sqlite" "CREATE TEMP TABLE t AS SELECT * FROM intents WHERE intent = 'charge:order-125';
    UPDATE t SET intent = $1; INSERT INTO intents SELECT * FROM t" >/dev/null
}
escaped_state() { q "$WORK/escaped.sqlite" "SELECT state FROM intents WHERE intent = $1"; }
copy_fenced "'evil' || char(27) || '[2J'"
run "$EF" fenced --db "$WORK/escaped.sqlite"
expect_match "$OUT" 'evil\\x1b\[2J' "fenced prints the intent escaped"
run "$EF" clear --db "$WORK/escaped.sqlite" 'evil\x1b[2J' --reason "checked" --operator dana
expect_eq "$RC $OUT" '0 cleared evil\x1b[2J (was unknown) by dana: checked' "clear takes the name as fenced printed it"
expect_eq "$(escaped_state "'evil' || char(27) || '[2J'")" "cleared" "and cleared the intent with the escape character"
copy_fenced "'twin' || char(27)"
copy_fenced "'twin\\x1b'"
run "$EF" clear --db "$WORK/escaped.sqlite" 'twin\x1b' --reason "checked"
expect_match "$RC $ERR" '^2 effectfence clear: finding the intent: two intents match: "twin\\\\x1b"' \
  "a name that is one intent's bytes and another's printed form is refused"
expect_eq "$(escaped_state "'twin' || char(27)") $(escaped_state "'twin\\x1b'")" "unknown unknown" "and neither is cleared"
run "$EF" clear --db "$WORK/escaped.sqlite" 'twin\x1b' --reason "checked" --exact
expect_eq "$RC $(escaped_state "'twin' || char(27)") $(escaped_state "'twin\\x1b'")" "0 unknown cleared" \
  "--exact clears the one named by those bytes"
copy_fenced "'C:\\tmp\\x'"
run "$EF" clear --db "$WORK/escaped.sqlite" 'C:\tmp\x' --reason "checked"
expect_eq "$RC $(escaped_state "'C:\\tmp\\x'")" "0 cleared" "a name with backslashes that is no printed form is taken as it is"
ttl_before=$(q "$LEDGER" "SELECT coalesce((SELECT value FROM retention WHERE name = 'result_ttl_ms'), 'none')")
run env USER=carol EFFECTFENCE_RESULT_TTL_SECS=315360000 "$EF" clear --db "$LEDGER" charge:order-124 --reason "provider: no such charge"
expect_eq "$RC $OUT" "0 cleared charge:order-124 (was failed) by carol: provider: no such charge" "clear clears, as \$USER"
expect_eq "$(q "$LEDGER" "SELECT coalesce((SELECT value FROM retention WHERE name = 'result_ttl_ms'), 'none')")" "$ttl_before" \
  "clear leaves the ledger's result TTL as the servers set it, whatever its own environment says"
expect_eq "$(q "$LEDGER" "SELECT actor || '|' || json_extract(detail, '\$.reason') FROM events WHERE kind = 'cleared' AND intent = 'charge:order-124'")" \
  "carol|provider: no such charge" "clear writes the audit event"
expect_eq "$(state_of payout:batch-9)" "unknown" "clear opens the ledger for writing: the dead holder's attempt is fenced"
run env -u USER "$EF" clear --db "$LEDGER" payout:batch-9 --reason "bank shows no payout" --json
expect_eq "$RC" 0 "clear clears a reaped attempt"
expect_eq "$(jq -c '[.cleared, .intent, .previous_state, .operator]' <<<"$OUT")" '[true,"payout:batch-9","unknown","operator"]' \
  "clear --json, operator defaults to \"operator\" without \$USER"
BEFORE=$(fingerprint "$LEDGER")
run "$EF" clear --db "$LEDGER" charge:order-123 --reason "again" --operator dave --json
expect_eq "$RC" 2 "clearing a done intent exits 2"
expect_match "$ERR" "^effectfence clear: clearing charge:order-123: effectfence: cannot clear: only failed or unknown intents" \
  "clearing a done intent names the step and the trigger's message"
expect_match "$ERR" "It is done: its effect ran" "and says what a done intent is"
expect_eq "$(jq -c '[.cleared, .refused]' <<<"$OUT")" '[false,"invalid_request"]' "clear --json reports the refusal"
run "$EF" clear --db "$LEDGER" charge:order-124 --reason "again"
expect_match "$RC $ERR" "^2 effectfence clear: clearing charge:order-124: .*It is cleared already: its next prepare is fresh, so there is nothing to clear" \
  "clearing an intent cleared before says so"
run "$EF" clear --db "$LEDGER" charge:order-999 --reason "typo"
expect_match "$RC $ERR" "^2 effectfence clear: clearing charge:order-999: effectfence: cannot clear: no such intent" "clearing an unknown intent is refused"
expect_eq "$(fingerprint "$LEDGER")" "$BEFORE" "refused clears change nothing"

echo "--- export"
run "$EF" export --db "$LEDGER" --out audit.jsonl
expect_eq "$RC" 0 "export --out runs"
CERTS=$(q "$LEDGER" "SELECT count(*) FROM certificates")
EVENTS=$(q "$LEDGER" "SELECT count(*) FROM events")
expect_eq "$ERR" "effectfence export: wrote $CERTS certificate(s) and $EVENTS event(s) to audit.jsonl" "export reports what it wrote"
expect_eq "$(jq -r .type audit.jsonl | uniq -c | awk '{print $2}' | sort -u | tr '\n' ' ')" "certificate end event export " \
  "every line is a JSON record with a type"
expect_eq "$(head -1 audit.jsonl | jq -c '[.type, .format, .since]')" '["export",2,null]' "the first line describes the export"
expect_eq "$(tail -1 audit.jsonl)" "{\"type\":\"end\",\"certificates\":$CERTS,\"events\":$EVENTS}" \
  "the last line is the end record, counting what the dump holds"
expect_eq "$(jq -r .type audit.jsonl | grep -c '^end$')" 1 "there is one end record"
expect_eq "$(jq -c 'select(.type == "certificate")' audit.jsonl | wc -l) $(jq -c 'select(.type == "event")' audit.jsonl | wc -l)" \
  "$CERTS $EVENTS" "export has every certificate and every event"
expect_eq "$(jq -r 'select(.type != "export" and .type != "end") | (.committed_at_ms // .at_ms)' audit.jsonl | sort -n -c 2>&1 && echo sorted)" "sorted" \
  "records are in order of time"
expect_eq "$(jq -r 'select(.type == "event") | .id' audit.jsonl | tr '\n' ' ')" "$(q "$LEDGER" "SELECT id FROM events ORDER BY at, id" | tr '\n' ' ')" \
  "events come in order (at, id)"
expect_eq "$(jq -c 'select(.type == "certificate" and (.body | fromjson | .intent) == "charge:order-123") | .hash' -r audit.jsonl)" \
  "$(cert_of charge:order-123)" "a certificate line carries its hash"
mismatches=0
while IFS=$'\t' read -r hash body_b64; do
  recomputed=$(base64 -d <<<"$body_b64" | sha256sum | cut -c1-64)
  [[ "$recomputed" == "$hash" ]] || mismatches=$((mismatches + 1))
done < <(jq -r 'select(.type == "certificate") | [.hash, (.body | @base64)] | @tsv' audit.jsonl)
expect_eq "$mismatches" 0 "sha256sum of every exported body is its hash (recomputed without effectfence)"
expect_eq "$(jq -c 'select(.type == "event" and .kind == "cleared" and .intent == "charge:order-124") | [.actor, .detail.reason]' audit.jsonl)" \
  '["carol","provider: no such charge"]' "event lines carry actor and detail"
run "$EF" export --db "$LEDGER"
expect_eq "$(tail -n +2 <<<"$OUT")" "$(tail -n +2 audit.jsonl)" "export to stdout writes the same records"

echo "--- export --since"
"$EF" export --db "$LEDGER" --since 1h >recent-relative.jsonl
"$EF" export --db "$LEDGER" --since "$(date -u -d '1 hour ago' +%Y-%m-%dT%H:%M:%SZ)" >recent-iso.jsonl
expect_eq "$(jq -c 'select(.type != "export" and .type != "end") | .type' recent-relative.jsonl | wc -l)" \
  "$(q "$LEDGER" "SELECT (SELECT count(*) FROM certificates WHERE committed_at >= (strftime('%s','now') - 3600) * 1000) + (SELECT count(*) FROM events WHERE at >= (strftime('%s','now') - 3600) * 1000)")" \
  "--since 1h exports exactly the last hour"
expect_eq "$(tail -n +2 recent-iso.jsonl)" "$(tail -n +2 recent-relative.jsonl)" "--since accepts ISO-8601 UTC"
expect_match "$(head -1 recent-iso.jsonl | jq -r .since)" '^[0-9-]{10}T[0-9:]{8}\.000Z$' "the header records the cutoff"
"$EF" export --db "$LEDGER" --since 2999-01-01T00:00:00Z >future.jsonl
expect_eq "$(jq -c .type future.jsonl | tr '\n' ' ')" '"export" "end" ' "--since in the future exports only the header and the end record"
run "$EF" verify --export future.jsonl
expect_eq "$RC" 0 "an export with nothing in it verifies"

echo "--- export --format csv"
run "$EF" export --db "$LEDGER" --format csv --out audit.csv
expect_eq "$RC" 0 "export --format csv runs"
expect_eq "$(head -1 audit.csv | tail -c 2 | od -An -tx1 | tr -d ' ')" "0d0a" "CSV lines end in CRLF"
rm -f csv.sqlite
"$SQLITE3" -batch csv.sqlite ".import --csv audit.csv t" "ATTACH '$LEDGER' AS l" >/dev/null
csvq() { "$SQLITE3" -batch -noheader csv.sqlite "ATTACH '$LEDGER' AS l" "$1"; }
expect_eq "$(csvq "SELECT count(*) FROM t WHERE type = 'certificate'") $(csvq "SELECT count(*) FROM t WHERE type = 'event'")" \
  "$CERTS $EVENTS" "the CSV has every certificate and event"
expect_eq "$(csvq "SELECT count(*) FROM t JOIN l.certificates c ON c.hash = t.certificate AND c.body = t.body AND c.agent = t.agent")" \
  "$CERTS" "CSV certificate rows read back byte for byte (RFC 4180 quoting)"
expect_eq "$(csvq "SELECT count(*) FROM t JOIN l.events e ON e.id = t.event_id AND e.detail = t.detail AND e.actor = t.actor")" \
  "$EVENTS" "CSV event rows read back byte for byte"
expect_eq "$(csvq "SELECT intent || '/' || agent FROM t WHERE tool = 'open_ticket'")" 'ticket:"db down", sev1/sre-agent, night shift' \
  "commas and quotes survive"

echo "--- export output errors"
run "$EF" export --db "$LEDGER" --out "$WORK/no/such/dir/audit.jsonl"
expect_match "$RC $ERR" "^2 effectfence export: opening the output: cannot create " "export names an output it cannot create"
expect_eq "$(ls "$WORK" | grep -c partial)" 0 "no partial file is left behind"
# A pipe or a symlink given as --out is written through, never replaced.
mkfifo "$WORK/pipe"
cat "$WORK/pipe" >"$WORK/from-pipe.jsonl" &
reader=$!
run "$EF" export --db "$LEDGER" --out "$WORK/pipe"
wait "$reader"
expect_eq "$RC $(tail -n +2 "$WORK/from-pipe.jsonl" | wc -l)" "0 $((CERTS + EVENTS + 1))" "export writes through a pipe given as --out"
expect_eq "$(stat -c %F "$WORK/pipe")" "fifo" "the pipe is still a pipe"
ln -s "$WORK/link-target.jsonl" "$WORK/link.jsonl"
run "$EF" export --db "$LEDGER" --out "$WORK/link.jsonl"
expect_eq "$(stat -c %F "$WORK/link.jsonl") $(tail -n +2 "$WORK/link-target.jsonl" | wc -l)" "symbolic link $((CERTS + EVENTS + 1))" \
  "export writes through a symlink given as --out and keeps the link"
# /dev/stdout is the shell's stream: appended to by `>>`, never truncated.
echo "an earlier line" >"$WORK/appended.log"
"$EF" export --db "$LEDGER" --out /dev/stdout >>"$WORK/appended.log" 2>/dev/null
"$EF" export --db "$LEDGER" --out /dev/fd/1 >>"$WORK/appended.log" 2>/dev/null
expect_eq "$(head -n 1 "$WORK/appended.log")|$(grep -c '"type":"end"' "$WORK/appended.log")" "an earlier line|2" \
  "export --out /dev/stdout appends to a file the shell appends to, keeping its earlier lines"
# It writes through the shell's own stream, at its place: lines the shell
# writes before and after the dump stay before and after it.
{ echo "before"; "$EF" export --db "$LEDGER" --out /dev/stdout 2>/dev/null; echo "after"; } >"$WORK/between.log"
expect_eq "$(head -n 1 "$WORK/between.log")|$(sed -n 2p "$WORK/between.log" | cut -c1-16)|$(tail -n 2 "$WORK/between.log" | head -n 1 | cut -c1-13)|$(tail -n 1 "$WORK/between.log")|$(wc -l <"$WORK/between.log")" \
  'before|{"type":"export"|{"type":"end"|after|'"$((CERTS + EVENTS + 4))" \
  "export --out /dev/stdout writes at the shell's place in its stream: what the shell wrote before and after stays around the dump"

echo "--- serve and wrap refuse a closed stdin or stdout"
# A closed stream's number would go to the next pipe or file opened (the stop
# pipe, the ledger) and be read or written as the protocol stream.
"$EF" serve --db "$WORK/closed.sqlite" <&- >"$WORK/out" 2>"$WORK/err"
expect_eq "$? $(cat "$WORK/err")" "2 effectfence serve: stdin is closed: it speaks MCP, reading requests on stdin and answering on stdout. Start it from an MCP client, which connects both" \
  "serve started with stdin closed names it and exits 2"
"$EF" serve --db "$WORK/closed.sqlite" >&- 2>"$WORK/err" </dev/null
expect_eq "$? $(cat "$WORK/err")" "2 effectfence serve: stdout is closed: it speaks MCP, reading requests on stdin and answering on stdout. Start it from an MCP client, which connects both" \
  "serve started with stdout closed names it and exits 2"
"$EF" wrap --db "$WORK/closed.sqlite" -- true >&- 2>"$WORK/err" </dev/null
expect_match "$? $(cat "$WORK/err")" "^2 effectfence wrap: stdout is closed" "wrap started with stdout closed names it and exits 2"
"$EF" wrap --db "$WORK/closed.sqlite" -- true <&- >"$WORK/out" 2>"$WORK/err"
expect_match "$? $(cat "$WORK/err")" "^2 effectfence wrap: stdin is closed" "wrap started with stdin closed names it and exits 2"
expect_eq "$(ls "$WORK" | grep -c closed.sqlite)" 0 "and neither created a ledger"

echo "--- export --out never replaces the ledger or another database"
BEFORE=$(fingerprint "$LEDGER")
BEFORE_BYTES=$(sha256sum <"$LEDGER")
LEDGER_FILES=$(ls "$WORK" | grep -E '^ledger.sqlite')
run "$EF" export --db "$LEDGER" --out "$LEDGER"
expect_eq "$RC $ERR" "2 effectfence export: opening the output: --out $LEDGER is $LEDGER, the ledger or a file SQLite keeps beside it; refusing to overwrite it (give the dump another name)" \
  "export refuses to write over the ledger"
run env EFFECTFENCE_LEDGER="$LEDGER" "$EF" export --out ./ledger.sqlite
expect_match "$RC $ERR" "^2 effectfence export: opening the output: --out ./ledger.sqlite is .*, the ledger or a file SQLite keeps beside it" \
  "export refuses the ledger under another name (\$EFFECTFENCE_LEDGER, a relative --out)"
ln -s "$LEDGER" "$WORK/ledger-link.sqlite"
run "$EF" export --db "$LEDGER" --out "$WORK/ledger-link.sqlite"
expect_match "$RC $ERR" "^2 effectfence export: opening the output: --out .*ledger-link.sqlite is .*, the ledger or a file SQLite keeps beside it" \
  "export refuses a symlink to the ledger"
ln "$LEDGER" "$WORK/ledger-hardlink.sqlite"
run "$EF" export --db "$LEDGER" --out "$WORK/ledger-hardlink.sqlite"
expect_match "$RC $ERR" "^2 effectfence export: opening the output: --out .*ledger-hardlink.sqlite is .*, the ledger or a file SQLite keeps beside it" \
  "export refuses a hard link to the ledger (same device and inode)"
# A ledger whose header's application_id was damaged is one to restore, not
# another application's file.
"$SQLITE3" -batch "$LEDGER" ".backup $WORK/misidentified.sqlite"
q "$WORK/misidentified.sqlite" "PRAGMA application_id = 1430670915" >/dev/null
for cmd in stats fenced verify export; do
  run "$EF" $cmd --db "$WORK/misidentified.sqlite"
  expect_match "$RC $ERR" "^2 effectfence $cmd: .*holds an effectfence ledger's tables, but its header's application_id is 1430670915" \
    "$cmd names a damaged application_id as such"
done
rm -f "$WORK/misidentified.sqlite"
# A directory where the ledger's -wal goes is named, not taken for an
# unwritable ledger.
"$SQLITE3" -batch "$LEDGER" ".backup $WORK/dirwal.sqlite"
rm -f "$WORK/dirwal.sqlite-wal"
mkdir "$WORK/dirwal.sqlite-wal"
for cmd in stats export; do
  run "$EF" $cmd --db "$WORK/dirwal.sqlite"
  expect_match "$RC $ERR" "^2 effectfence $cmd: .*dirwal.sqlite-wal beside it, which is a directory" \
    "$cmd names a directory where the ledger's -wal goes"
done
rm -rf "$WORK"/dirwal.sqlite*
# Read under a name its servers do not use, a ledger would be read without
# its log: refused under either name, as serve refuses it.
for name in "$LEDGER" "$WORK/ledger-hardlink.sqlite"; do
  for cmd in stats fenced verify export; do
    run "$EF" $cmd --db "$name"
    expect_match "$RC $ERR" "^2 effectfence $cmd: .*has 2 names \(hard links\)" \
      "$cmd refuses a ledger with a second name (a hard link), under $(basename "$name")"
  done
done
rm -f "$WORK/ledger-hardlink.sqlite"
for suffix in -wal -shm -journal; do
  run "$EF" export --db "$LEDGER" --out "$LEDGER$suffix"
  expect_match "$RC $ERR" "^2 effectfence export: opening the output: --out $LEDGER$suffix is $LEDGER$suffix, the ledger or a file SQLite keeps beside it" \
    "export refuses the ledger's $suffix file, whether or not it exists"
  # SQLite names them after the resolved ledger: given through a link, the real names are refused too.
  run "$EF" export --db "$WORK/ledger-link.sqlite" --out "$LEDGER$suffix"
  expect_match "$RC $ERR" "^2 effectfence export: opening the output: --out $LEDGER$suffix is " \
    "export refuses the resolved ledger's $suffix file when the ledger is given through a link"
done
expect_eq "$(ls "$WORK" | grep -E 'partial|^ledger.sqlite')" "$LEDGER_FILES" "no file was created"
expect_eq "$(sha256sum <"$LEDGER") $(fingerprint "$LEDGER")" "$BEFORE_BYTES $BEFORE" "the ledger is byte for byte as it was"
OTHER_BYTES=$(sha256sum <"$WORK/other.sqlite")
run "$EF" export --db "$LEDGER" --out "$WORK/other.sqlite"
expect_eq "$RC $ERR" "2 effectfence export: opening the output: --out $WORK/other.sqlite is an SQLite file; refusing to replace it with a dump (give the dump another name)" \
  "export refuses to replace another SQLite database"
expect_eq "$(sha256sum <"$WORK/other.sqlite")" "$OTHER_BYTES" "which is left as it was"
printf '\x37\x7f\x06\x82rest of a write-ahead log' >"$WORK/some.sqlite-wal"
run "$EF" export --db "$LEDGER" --out "$WORK/some.sqlite-wal"
expect_match "$RC $ERR" "^2 effectfence export: opening the output: --out $WORK/some.sqlite-wal is an SQLite file" \
  "export refuses to replace another database's write-ahead log"
: >"$WORK/other.sqlite-wal"
run "$EF" export --db "$LEDGER" --out "$WORK/other.sqlite-wal"
expect_eq "$RC $ERR" "2 effectfence export: opening the output: --out $WORK/other.sqlite-wal is where SQLite keeps the log or lock of the database $WORK/other.sqlite; refusing to write there (give the dump another name)" \
  "export refuses another database's empty write-ahead log (what a checkpoint leaves)"
ln -s "$WORK/other.sqlite-wal" "$WORK/wal-link.jsonl"
run "$EF" export --db "$LEDGER" --out "$WORK/wal-link.jsonl"
expect_match "$RC $ERR" "^2 effectfence export: opening the output: --out $WORK/wal-link.jsonl is where SQLite keeps the log or lock of the database .*other.sqlite;" \
  "export refuses a symlink to another database's empty write-ahead log"
expect_eq "$(stat -c %s "$WORK/other.sqlite-wal")" 0 "which is left as it was"
rm -f "$WORK/wal-link.jsonl" "$WORK/other.sqlite-wal"
run "$EF" export --db "$LEDGER" --out audit.jsonl
expect_eq "$RC" 0 "export replaces an earlier dump"

echo "--- verify"
run "$EF" verify --db "$LEDGER" --json
expect_eq "$RC" 0 "verify passes an intact ledger"
expect_eq "$(jq -c '[.ok, .source, .certificates, .problems_total]' <<<"$OUT")" "[true,\"ledger\",$CERTS,0]" "verify --json reports what it checked"
run "$EF" verify --export audit.jsonl
expect_eq "$RC" 0 "verify passes an intact export"
expect_match "$OUT" "^export audit.jsonl: $CERTS certificate\(s\), $EVENTS event\(s\): every hash" "verify says what it checked"

CHARGE=$(cert_of charge:order-123)
RECEIPT=$(cert_of receipt:order-123)

copy=$(tampered_copy body.sqlite)
tamper "$copy" "UPDATE certificates SET body = replace(body, '\"amount_cents\":4900', '\"amount_cents\":4901') WHERE intent = 'charge:order-123'" $CERTIFICATE_TRIGGERS
run "$EF" verify --db "$copy"
expect_eq "$RC" 1 "verify fails a ledger with an altered certificate body"
expect_match "$OUT" "^  $CHARGE: hash_mismatch: " "verify names the altered certificate"
run "$EF" verify --db "$copy" --json
expect_eq "$(jq -c '[.ok, .problems_total, .problems[0].certificate, .problems[0].kind]' <<<"$OUT")" "[false,1,\"$CHARGE\",\"hash_mismatch\"]" \
  "verify --json names the altered certificate"

copy=$(tampered_copy parent.sqlite)
tamper "$copy" "DELETE FROM certificates WHERE intent = 'charge:order-123'" $CERTIFICATE_TRIGGERS
run "$EF" verify --db "$copy" --json
expect_eq "$RC" 1 "verify fails a ledger with a deleted certificate"
expect_eq "$(jq -c '[.problems[] | [.certificate, .kind]] | sort' <<<"$OUT")" \
  "$(jq -nc --arg c "$CHARGE" --arg r "$RECEIPT" '[[$c, "missing_certificate"], [$c, "missing_certificate"], [$r, "missing_parent"]] | sort')" \
  "verify reports the broken parent link, and the done intent and the committed event without their certificate"

copy=$(tampered_copy clock.sqlite)
body=$(q "$copy" "SELECT body FROM certificates WHERE intent = 'receipt:order-123'")
forged=$(sed -E 's/"vector_clock":\{[^}]*\}/"vector_clock":{}/' <<<"$body")
forged_hash=$(printf '%s' "$forged" | sha256sum | cut -c1-64)
expect_match "$body" '"vector_clock":\{"[^}]+\}' "the receipt has a vector clock to forge"
tamper "$copy" "UPDATE certificates SET body = '$forged', hash = '$forged_hash' WHERE intent = 'receipt:order-123'" $CERTIFICATE_TRIGGERS
run "$EF" verify --db "$copy" --json
expect_eq "$RC" 1 "verify fails a resealed certificate whose clock goes backwards"
expect_eq "$(jq -c --arg h "$forged_hash" '[.problems[] | select(.certificate == $h) | .kind] | sort' <<<"$OUT")" \
  '["clock_not_dominating","missing_event"]' "verify names the certificate whose clock does not dominate its parent's"

# A certificate's columns are read from its hashed body (schema 14): even
# past its triggers, no edit makes one disagree with the body.
copy=$(tampered_copy columns.sqlite)
run "$SQLITE3" -batch "$copy" "DROP TRIGGER certificates_immutable_update;
  UPDATE certificates SET tool = 'refund' WHERE intent = 'charge:order-123'"
expect_eq "$RC $(q "$copy" "SELECT tool FROM certificates WHERE intent = 'charge:order-123'")" "1 charge" \
  "a certificate's column cannot be set apart from its hashed body"
expect_match "$ERR" "cannot UPDATE generated column" "SQLite itself refuses it"

copy=$(tampered_copy many.sqlite)
tamper "$copy" "UPDATE certificates SET body = body || ' '" $CERTIFICATE_TRIGGERS
run "$EF" verify --db "$copy" --limit 2 --json
expect_eq "$(jq -c '[(.problems | length), .problems_total > 2]' <<<"$OUT")" "[2,true]" "--limit shows the first N problems and counts all"
run "$EF" verify --db "$copy" --limit 2
expect_match "$OUT" "\.\.\. and [0-9]+ more" "verify text says how many were not shown"

echo "--- verify: certificates against the event log, the domains and the intents"
# problems LEDGER: runs verify; PROBLEMS is the sorted [certificate, kind] pairs it reports.
problems() {
  run "$EF" verify --db "$1" --json
  PROBLEMS=$(jq -c '[.problems[] | [.certificate, .kind]] | sort' <<<"$OUT")
}
pairs() { jq -nc '[$ARGS.positional | _nwise(2)] | sort' --args "$@"; }

# A certificate added with a plain INSERT (no trigger dropped): well formed,
# correctly hashed, but no commit issued it, and its seq was never handed out.
copy=$WORK/forged.sqlite
q "$LEDGER" ".backup '$copy'"
DOMAIN_SEQ=$(q "$copy" "SELECT seq FROM domains WHERE domain = 'order:123'")
body=$(q "$copy" "SELECT body FROM certificates WHERE hash = '$CHARGE'")
expect_eq "$(jq -cS . <<<"$body")" "$body" "jq -cS writes the charge's body in canonical form"
forged=$(jq -cS --argjson seq $((DOMAIN_SEQ + 1)) '.intent = "charge:order-123-again" | .seq = $seq' <<<"$body")
forged_hash=$(printf '%s' "$forged" | sha256sum | cut -c1-64)
q "$copy" "INSERT INTO certificates(hash, body, committed_at)
             SELECT '$forged_hash', '$forged', committed_at + 1 FROM certificates WHERE hash = '$CHARGE'"
problems "$copy"
expect_eq "$RC $PROBLEMS" \
  "1 $(pairs "$forged_hash" missing_event "$forged_hash" not_admitted "$forged_hash" seq_beyond_domain)" \
  "verify fails a certificate inserted without a commit or an admission, and one beyond its domain's seq"

# The same with its committed event, at a seq an aborted attempt left
# without a certificate (plain INSERTs: the log is append-only, not closed).
# No admission handed that seq to it; one inserted too hands it out twice.
# (Its domain's head, still unset, is behind it: reported too.)
copy=$WORK/forged-in-gap.sqlite
q "$LEDGER" ".backup '$copy'"
GAP=$(q "$copy" "SELECT domain || '|' || seq FROM intents WHERE intent = 'charge:order-124'")
GAP_DOMAIN=${GAP%|*} GAP_SEQ=${GAP#*|}
forged=$(jq -cS --arg d "$GAP_DOMAIN" --argjson seq "$GAP_SEQ" \
  '.intent = "refund:order-124" | .domain = $d | .seq = $seq' <<<"$body")
forged_hash=$(printf '%s' "$forged" | sha256sum | cut -c1-64)
q "$copy" "INSERT INTO certificates(hash, body, committed_at)
             SELECT '$forged_hash', '$forged', committed_at FROM certificates WHERE hash = '$CHARGE';
           INSERT INTO events(at, kind, intent, domain, seq, generation, actor, detail)
             VALUES (1, 'committed', 'refund:order-124', '$GAP_DOMAIN', $GAP_SEQ, 1, 'mallory',
                     '{\"certificate\":\"$forged_hash\"}')"
problems "$copy"
expect_eq "$RC $PROBLEMS" "1 $(pairs "" impossible_history "$forged_hash" head_behind "$forged_hash" not_admitted)" \
  "verify fails a certificate and its committed event inserted at a seq no admission handed it (a commit with no admission before it)"
q "$copy" "INSERT INTO events(at, kind, intent, domain, seq, generation, actor, detail)
             VALUES (1, 'admitted', 'refund:order-124', '$GAP_DOMAIN', $GAP_SEQ, 1, 'mallory', '{}')"
problems "$copy"
expect_eq "$RC $PROBLEMS" "1 $(pairs "" impossible_history "$forged_hash" head_behind "$forged_hash" seq_reused)" \
  "and, with an admission event inserted too, a seq handed out twice"

# An event no fence writes: an abort of an intent already done. Each event
# passes on its own (the log is append-only, not closed); only the order of
# the intent's history, replayed against the state machine, tells.
copy=$WORK/impossible-history.sqlite
q "$LEDGER" ".backup '$copy'"
q "$copy" "INSERT INTO events(at, kind, intent, domain, seq, generation, actor, detail)
             SELECT at + 1, 'aborted', intent, domain, seq, generation, 'mallory', '{}' FROM events
              WHERE intent = 'charge:order-123' AND kind = 'committed'"
problems "$copy"
expect_eq "$RC $PROBLEMS" '1 [["","impossible_history"]]' \
  "verify fails an intent whose history no fence writes (aborted after committed)"
expect_match "$OUT" "intent 'charge:order-123': aborted event [0-9]+ cannot follow state done" \
  "and names the intent, the event and the state it could not follow"

# A refused commit whose reason is not a string reads as no reason: verify
# still judges the history (here: a generation never admitted) and does not
# stop on the detail's type.
copy=$WORK/refusal-reason.sqlite
q "$LEDGER" ".backup '$copy'"
q "$copy" "INSERT INTO events(at, kind, intent, domain, seq, generation, actor, detail)
             SELECT at + 1, 'commit_refused', intent, domain, seq, 99, 'mallory', '{\"reason\":7}' FROM events
              WHERE intent = 'charge:order-123' AND kind = 'committed'"
problems "$copy"
expect_eq "$RC $PROBLEMS" '1 [["","impossible_history"]]' \
  "verify judges a refused commit whose reason is not a string"
expect_match "$OUT" "intent 'charge:order-123': commit_refused event [0-9]+ names generation 99, which was never admitted" \
  "and names the generation no admission handed out"

# A fork: a second certificate at the charge's seq (correctly hashed, with
# its committed event), the trigger it passed put back. No index keeps a
# (domain, seq) once: verify counts certificates per seq itself.
copy=$(tampered_copy forked.sqlite)
forked=$(jq -cS '.result = {"charge_id": "ch_forged"}' <<<"$body")
forked_hash=$(printf '%s' "$forked" | sha256sum | cut -c1-64)
tamper "$copy" "INSERT INTO certificates(hash, body, committed_at)
                  SELECT '$forked_hash', '$forked', committed_at FROM certificates WHERE hash = '$CHARGE';
                INSERT INTO events(at, kind, intent, domain, seq, generation, actor, detail)
                  SELECT at, kind, intent, domain, seq, generation, actor, '{\"certificate\":\"$forked_hash\"}'
                  FROM events WHERE kind = 'committed' AND intent = 'charge:order-123'" certificates_immutable_replace
problems "$copy"
expect_eq "$RC $PROBLEMS" "1 $(pairs "" impossible_history "$CHARGE" duplicate_seq "$forked_hash" duplicate_seq)" \
  "verify fails two certificates at one (domain, seq)"

# A certificate rewritten and resealed (trigger dropped), with the done
# intent and the domain head repointed: the committed event still names the
# original.
copy=$(tampered_copy resealed.sqlite)
body=$(q "$copy" "SELECT body FROM certificates WHERE hash = '$RECEIPT'")
resealed=$(sed 's/"sent":true/"sent":false/' <<<"$body")
resealed_hash=$(printf '%s' "$resealed" | sha256sum | cut -c1-64)
tamper "$copy" "UPDATE certificates SET body = '$resealed', hash = '$resealed_hash' WHERE hash = '$RECEIPT';
                UPDATE domains SET head = '$resealed_hash' WHERE head = '$RECEIPT';
                UPDATE intents SET cert_hash = '$resealed_hash' WHERE cert_hash = '$RECEIPT'" $CERTIFICATE_TRIGGERS \
  domains_sequence_kept intents_done_kept
problems "$copy"
expect_eq "$RC $PROBLEMS" "1 $(pairs "$resealed_hash" missing_event "$RECEIPT" missing_certificate)" \
  "verify fails a resealed certificate: no commit issued it, and its committed event names the original"

# Deleting the newest certificate and everything that pointed at it but the
# append-only event log.
copy=$(tampered_copy removed.sqlite)
tamper "$copy" "DELETE FROM certificates WHERE hash = '$RECEIPT';
                UPDATE domains SET head = '$CHARGE', head_seq = 1 WHERE domain = 'order:123';
                DELETE FROM intents WHERE intent = 'receipt:order-123'" $CERTIFICATE_TRIGGERS intents_results_kept \
  domains_sequence_kept
problems "$copy"
expect_eq "$RC $PROBLEMS" "1 $(pairs "$RECEIPT" missing_certificate)" \
  "verify fails a deleted certificate whose committed event is still in the log"

# Crossed references, past schema 9's triggers (a done intent is not
# changed; a domain's head only moves forward).
copy=$WORK/crossed.sqlite
q "$LEDGER" ".backup '$copy'"
PAYOUT=$(cert_of payout:batch-8 "$copy")
tamper "$copy" "UPDATE intents SET cert_hash = '$CHARGE' WHERE intent = 'receipt:order-123';
                UPDATE domains SET head = '$CHARGE' WHERE domain = 'payouts';
                UPDATE domains SET head_seq = head_seq + 1 WHERE domain = 'order:123'" domains_sequence_kept \
  intents_done_kept
problems "$copy"
expect_eq "$RC $PROBLEMS" \
  "1 $(pairs "$CHARGE" wrong_certificate "$CHARGE" wrong_certificate "$RECEIPT" wrong_certificate)" \
  "verify fails a done intent naming another intent's certificate, a head naming another domain's or another seq's"
run "$EF" verify --db "$copy"
expect_match "$OUT" "intent 'receipt:order-123' is done with it, but it is a certificate of intent 'charge:order-123'" \
  "verify says whose certificate a done intent names"

# A domain's head set back, and a domain deleted, past schema 9's triggers:
# the next effect would not chain to the newest certificate, or would reuse
# a sequence number.
copy=$(tampered_copy rewound.sqlite)
tamper "$copy" "UPDATE domains SET head = '$CHARGE', head_seq = 1 WHERE domain = 'order:123';
                DELETE FROM domains WHERE domain = 'payouts'" domains_sequence_kept domains_evicted_with_event
problems "$copy"
expect_eq "$RC $PROBLEMS" "1 $(pairs "$RECEIPT" head_behind "" domain_missing)" \
  "verify fails a domain whose head was set back, and one deleted without its eviction event"
run "$EF" verify --db "$copy"
expect_match "$OUT" "domain 'order:123' names seq 1 as its latest certificate, but this one is at seq 2" \
  "verify says how far a domain's head was set back"

# A done intent moved out of done, past schema 9's trigger, and then cleared
# (the audit's way to a second run of its effect).
copy=$(tampered_copy undone.sqlite)
tamper "$copy" "UPDATE intents SET state = 'failed', reason = 'aborted: timeout' WHERE intent = 'charge:order-123'" \
  intents_done_kept
problems "$copy"
expect_eq "$RC $PROBLEMS" "1 $(pairs "$CHARGE" effect_undone)" "verify fails a done intent moved out of done"
q "$copy" "INSERT INTO clears(intent, operator, reason) VALUES ('charge:order-123', 'mallory', 'looks unpaid')" >/dev/null
problems "$copy"
expect_eq "$RC $PROBLEMS" "1 $(pairs "" impossible_history "$CHARGE" effect_cleared "$CHARGE" effect_undone)" \
  "verify fails an intent cleared at the generation whose effect ran"
run "$EF" verify --db "$copy"
expect_match "$OUT" "intent 'charge:order-123' was cleared \\(by mallory\\) at generation 1, whose effect this certificate records" \
  "verify names who cleared an effect that had run"

# A damaged index that no longer matches its table: quick_check, which the
# servers run at open, passes it, and a lookup of an intent through it
# misses the row. verify runs integrity_check.
copy=$(tampered_copy damaged-index.sqlite)
q "$copy" "PRAGMA wal_checkpoint(TRUNCATE)" >/dev/null
ROOT=$(q "$copy" "SELECT rootpage FROM sqlite_master WHERE name = 'sqlite_autoindex_intents_1'")
PAGE=$(q "$copy" "PRAGMA page_size")
printf '~' | dd of="$copy" bs=1 seek=$((ROOT * PAGE - 1)) conv=notrunc status=none  # in the last cell's key
expect_eq "$(q "$copy" "PRAGMA quick_check")" ok "(quick_check passes the damaged index)"
problems "$copy"
expect_eq "$RC $(jq -c 'unique' <<<"$PROBLEMS")" '1 [["","damaged_file"]]' "verify fails a ledger whose intents index no longer matches its table"
run "$EF" verify --db "$copy"
expect_match "$OUT" "damaged_file: SQLite's integrity_check: row [0-9]+ missing from index sqlite_autoindex_intents_1" \
  "verify quotes what integrity_check found"
run "$EF" serve --db "$copy" </dev/null
expect_match "$RC $ERR" "^[1-9][0-9]* .*cannot open ledger: corrupt: .*PRAGMA integrity_check: row [0-9]+ missing from index sqlite_autoindex_intents_1" \
  "serve refuses a ledger whose intents index no longer matches its table"

# A holder that committed after an operator cleared its intent: the effect
# ran, so the intent is done with its certificate, and that is no tampering.
copy=$WORK/after-clear.sqlite
q "$LEDGER" ".backup '$copy'"
LATE=$("$FIXTURE" commit-after-clear "$copy" charge:order-130)
expect_eq "$(q "$copy" "SELECT state || ' ' || cert_hash FROM intents WHERE intent = 'charge:order-130'")" "done $LATE" \
  "a holder's commit after a clear leaves the intent done with its certificate"
problems "$copy"
expect_eq "$RC $PROBLEMS" "0 []" "verify passes an intent committed by its holder after it was cleared"

# A done intent swept after the result lifetime and admitted again starts
# over at generation 1, the certificate's generation: that attempt in
# flight, then aborted, cleared and run again, is no effect undone or
# cleared: each step is the fence's own.
for until in admitted rerun; do
  copy=$WORK/swept-$until.sqlite
  q "$LEDGER" ".backup '$copy'"
  "$FIXTURE" swept-and-run-again "$copy" charge:order-140 "$until"
  problems "$copy"
  expect_eq "$RC $PROBLEMS" "0 []" "verify passes an intent swept and admitted again at its old generation ($until)"
done
expect_eq "$(q "$copy" "SELECT count(*) FROM certificates WHERE intent = 'charge:order-140'")" 2 \
  "(both attempts' certificates are kept)"
# ... but a hand edit writes no admission after the sweep: the run again is
# reported when its intent is moved out of done by hand.
RERUN=$(q "$copy" "SELECT cert_hash FROM intents WHERE intent = 'charge:order-140'")
tamper "$copy" "UPDATE intents SET state = 'failed', reason = 'x' WHERE intent = 'charge:order-140'" intents_done_kept
problems "$copy"
expect_eq "$RC $PROBLEMS" "1 $(pairs "$RERUN" effect_undone)" \
  "verify still fails the latest attempt moved out of done after a sweep"

# Events appended with plain INSERTs (the log is append-only, not closed).
copy=$WORK/events.sqlite
q "$LEDGER" ".backup '$copy'"
NOWHERE=$(printf '0%.0s' {1..64})
q "$copy" "INSERT INTO events(at, kind, intent, actor, detail) VALUES
             (1, 'committed', 'charge:order-123', 'mallory', '{\"certificate\":\"$NOWHERE\"}'),
             (1, 'committed', 'charge:order-123', 'mallory', '{\"certificate\":\"$CHARGE\"}'),
             (1, 'committed', 'ticket:x', 'mallory', '{\"certificate\":\"$PAYOUT\"}'),
             (1, 'committed', 'ticket:x', 'mallory', '{}')"
problems "$copy"
expect_eq "$RC $PROBLEMS" \
  "1 $(pairs "$NOWHERE" missing_certificate "$CHARGE" duplicate_event "$PAYOUT" wrong_certificate "" bad_event \
     "" impossible_history "" impossible_history "" impossible_history "" impossible_history)" \
  "verify fails committed events naming no certificate, a missing one, another intent's, or one already named"

# A committed event edited to almost name its certificate (the hash in capitals,
# trailing text that is not JSON, the key twice) names none: the event log's
# update trigger dropped on a copy.
for edit in "upper(detail)" "detail || ' trailing'" "'{\"certificate\":\"$CHARGE\",\"certificate\":\"$CHARGE\"}'"; do
  copy=$WORK/near-miss.sqlite
  rm -f "$copy"
  q "$LEDGER" ".backup '$copy'"
  tamper "$copy" "UPDATE events SET detail = $edit WHERE kind = 'committed' AND intent = 'charge:order-123'" \
    events_append_only_update
  problems "$copy"
  expect_eq "$RC $PROBLEMS" "1 $(pairs "" bad_event "$CHARGE" missing_event)" \
    "verify fails a committed event whose detail only nearly names its certificate ($edit)"
done

# Protections dropped or rewritten: the rows may have been changed since.
copy=$(tampered_copy unprotected.sqlite)
q "$copy" "DROP TRIGGER events_append_only_delete; DROP TRIGGER intents_cleared_through_clears;
           CREATE TRIGGER intents_cleared_through_clears BEFORE UPDATE OF state ON intents WHEN 0 BEGIN SELECT 1; END"
problems "$copy"
expect_eq "$RC $PROBLEMS" "1 $(pairs "" protection_changed "" protection_missing)" \
  "verify fails a ledger whose protections were dropped or rewritten"
run "$EF" verify --db "$copy"
expect_match "$OUT" "protection_missing: trigger events_append_only_delete on events was dropped" \
  "verify names the dropped trigger"
expect_match "$OUT" "protection_changed: trigger intents_cleared_through_clears on intents is not the one effectfence created" \
  "verify names the rewritten trigger"

# The views the runbook and `fenced` read, rewritten to hide a row or dropped.
copy=$(tampered_copy views.sqlite)
q "$copy" "DROP VIEW recent_effects; DROP VIEW fenced;
           CREATE VIEW recent_effects AS SELECT * FROM certificates WHERE intent <> 'charge:order-123'"
problems "$copy"
expect_eq "$RC $PROBLEMS" "1 $(pairs "" protection_changed "" protection_missing)" \
  "verify fails a ledger whose runbook views were rewritten or dropped"
run "$EF" verify --db "$copy"
expect_match "$OUT" "protection_changed: view recent_effects is not the one effectfence created: what it shows may hide rows" \
  "verify names the rewritten view"
expect_match "$OUT" "protection_missing: view fenced was dropped" "verify names the dropped view"

# A ledger at an older schema is held to the protections of its own version.
copy=$WORK/schema3.sqlite
for migration in "$MIGRATIONS_DIR"/000[123]_*.sql; do cat "$migration"; done | "$SQLITE3" -batch "$copy"
q "$copy" "PRAGMA application_id = 1162235459; PRAGMA user_version = 3" >/dev/null
run "$EF" verify --db "$copy" --json
expect_eq "$RC $(jq -c '[.ok, .problems_total]' <<<"$OUT")" "0 [true,0]" \
  "verify holds a schema 3 ledger to schema 3's protections, not to later ones"
q "$copy" "DROP TRIGGER events_append_only_replace"
problems "$copy"
expect_eq "$RC $PROBLEMS" "1 $(pairs "" protection_missing)" "verify fails a schema 3 ledger missing one of them"

# What a ledger legitimately loses: swept intents and evicted domains.
copy=$WORK/swept.sqlite
q "$LEDGER" ".backup '$copy'"
# (The sweep goes past the trigger that keeps results for the TTL, as if a
# day had passed; the eviction writes its event first, as effectfence does.)
tamper "$copy" "DELETE FROM intents WHERE state IN ('done', 'cleared');
                INSERT INTO events(at, kind, domain, seq, actor)
                SELECT 1, 'domain_evicted', domain, seq, 'test' FROM domains
                 WHERE NOT EXISTS (SELECT 1 FROM intents i WHERE i.domain = domains.domain);
                DELETE FROM domains WHERE NOT EXISTS (SELECT 1 FROM intents i WHERE i.domain = domains.domain)" \
  intents_results_kept
expect_eq "$(q "$copy" "SELECT count(*) FROM intents WHERE state = 'done'") $(q "$copy" "SELECT count(*) FROM domains WHERE domain LIKE 'order:10%'")" \
  "0 0" "the copy has swept intents and evicted domains"
run "$EF" verify --db "$copy" --json
expect_eq "$RC $(jq -c '[.ok, .certificates]' <<<"$OUT")" "0 [true,$CERTS]" \
  "verify passes a ledger whose finished intents were swept and idle domains evicted"

# What verify quotes from the ledger (an intent name anyone with SQL access
# wrote) reaches the terminal with its control characters escaped.
copy=$WORK/escapes.sqlite
q "$LEDGER" ".backup '$copy'"
q "$copy" "INSERT INTO events (at, kind, intent, actor, detail)
           VALUES (0, 'committed', 'evil' || char(27) || '[2J' || char(10) || 'forged line', 'x', '{\"certificate\":\"abc\"}')"
run "$EF" verify --db "$copy"
expect_eq "$RC" 1 "verify fails a committed event naming no certificate in the ledger"
expect_eq "$(grep -c $'\e' <<<"$OUT")" 0 "verify's text carries no escape character from the ledger"
expect_eq "$(grep -c '^forged line' <<<"$OUT")" 0 "verify's text cannot be given a forged line"
expect_match "$OUT" "intent 'evil\\\\x1b\\[2J\\\\x0aforged line' names it" "verify shows the intent with its control characters escaped"

echo "--- verify --export"
jq -c --arg h "$CHARGE" 'if .hash == $h then .body |= sub("\"amount_cents\":4900"; "\"amount_cents\":4901") else . end' \
  audit.jsonl >tampered.jsonl
run "$EF" verify --export tampered.jsonl --json
expect_eq "$RC" 1 "verify fails an export with an altered body"
line=$(grep -n "\"hash\":\"$CHARGE\"" tampered.jsonl | cut -d: -f1)
expect_eq "$(jq -c '[.problems[0].certificate, .problems[0].kind, .problems[0].line]' <<<"$OUT")" "[\"$CHARGE\",\"hash_mismatch\",$line]" \
  "verify names the certificate and the line"
run "$EF" verify --dump tampered.jsonl --json
expect_eq "$RC $(jq -r '.problems[0].certificate' <<<"$OUT")" "1 $CHARGE" "verify --dump is verify --export"
# export_problems FILE: runs verify --export; PROBLEMS as for problems.
export_problems() {
  run "$EF" verify --export "$1" --json
  PROBLEMS=$(jq -c '[.problems[] | [.certificate, .kind]] | sort' <<<"$OUT")
}
# with_end FILE: FILE's records with its end record recounted, as if export wrote them.
with_end() {
  jq -c 'select(.type != "end")' "$1" >"$1.body"
  { cat "$1.body"
    jq -sc '{type: "end", certificates: map(select(.type == "certificate")) | length,
             events: map(select(.type == "event")) | length}' "$1.body"; } >"$1"
  rm -f "$1.body"
}

grep -v "\"hash\":\"$CHARGE\"" audit.jsonl >orphan.jsonl
export_problems orphan.jsonl
expect_eq "$RC $PROBLEMS" "1 $(pairs "" count_mismatch "$CHARGE" missing_certificate "$RECEIPT" missing_parent)" \
  "verify fails a full export that lost a certificate: the counts, its committed event and its child say so"
with_end orphan.jsonl
export_problems orphan.jsonl
expect_eq "$RC $PROBLEMS" "1 $(pairs "$CHARGE" missing_certificate "$RECEIPT" missing_parent)" \
  "... also when the end record was recounted to match"

jq -c --arg h "$CHARGE" 'select(.type != "event" or .kind != "committed" or .detail.certificate != $h)' audit.jsonl >no-event.jsonl
with_end no-event.jsonl
export_problems no-event.jsonl
expect_eq "$RC $PROBLEMS" "1 $(pairs "$CHARGE" missing_event)" \
  "verify fails an export whose certificate lost its committed event"

# Records no ledger writes: an event id twice, a kind the ledger has not, a
# committed event whose seq disagrees with its certificate.
jq -c --arg h "$CHARGE" 'if .type == "event" and .kind == "committed" and .detail.certificate == $h
                         then .seq = .seq + 7 else . end' audit.jsonl >odd-events.jsonl
FIRST_EVENT=$(jq -c 'select(.type == "event")' audit.jsonl | head -n 1)
{ cat odd-events.jsonl
  jq -c '.kind = "refunded" | .id = 999999' <<<"$FIRST_EVENT"
  echo "$FIRST_EVENT"; } >odd-events.body
mv odd-events.body odd-events.jsonl
with_end odd-events.jsonl
export_problems odd-events.jsonl
expect_eq "$RC $(jq -c '[.[][1]] | sort' <<<"$PROBLEMS")" '1 ["bad_event","bad_record","bad_record","impossible_history","seq_reused"]' \
  "verify fails an export with an event id twice, an unknown kind, a committed event at another seq"
expect_eq "$(jq -c --arg h "$CHARGE" '[.[] | select(.[0] == $h) | .[1]]' <<<"$PROBLEMS")" '["bad_event"]' \
  "(the committed event is the charge's; the admission twice hands its seq out twice)"
# A certificate resealed at generation 0, with its committed event: it
# hashes, but no fence issues it.
body=$(jq -r --arg h "$CHARGE" 'select(.hash == $h) | .body' audit.jsonl)
zero=$(jq -cS '.generation = 0' <<<"$body")
zero_hash=$(printf '%s' "$zero" | sha256sum | cut -c1-64)
jq -c --arg h "$CHARGE" --arg z "$zero_hash" --arg body "$zero" '
  if .type == "certificate" and .hash == $h then .hash = $z | .body = $body
  elif .type == "event" and .kind == "committed" and .detail.certificate == $h then .detail.certificate = $z | .generation = 0
  else . end' audit.jsonl >zero.jsonl
export_problems zero.jsonl
expect_eq "$RC $(jq -c --arg z "$zero_hash" '[.[] | select(.[0] == $z) | .[1]]' <<<"$PROBLEMS")" \
  '1 ["not_a_certificate","not_admitted"]' \
  "verify fails a resealed certificate at generation 0: no fence issues it"

# A clear typed on a Latin-1 terminal: its bytes are replaced in the dump,
# and its event's detail is still an object.
copy=$WORK/latin1.sqlite
q "$LEDGER" ".backup '$copy'"
LATIN=$(q "$copy" "SELECT intent FROM intents WHERE state = 'failed' OR state = 'unknown' ORDER BY intent LIMIT 1")
q "$copy" "INSERT INTO clears(intent, operator, reason)
             VALUES ('$LATIN', 'jos' || CAST(x'e9' AS TEXT), 'checked ' || CAST(x'e9' AS TEXT))"
expect_eq "$("$EF" export --db "$copy" | jq -c --arg i "$LATIN" 'select(.kind == "cleared" and .intent == $i) |
                                                [.actor, (.detail | type), .detail.reason]')" \
  '["jos�","object","checked �"]' "a clear's bytes that are not UTF-8 are replaced, and its detail stays an object"

# A certificate and its committed event added to a whole dump, at a seq an
# aborted attempt left without one: no admission in the dump handed it out.
GAP=$(q "$LEDGER" "SELECT domain || '|' || seq FROM intents WHERE intent = 'charge:order-124'")
gap_body=$(jq -cS --arg d "${GAP%|*}" --argjson seq "${GAP#*|}" '.intent = "refund:order-124" | .domain = $d | .seq = $seq' \
  <<<"$(jq -r --arg h "$CHARGE" 'select(.hash == $h) | .body' audit.jsonl)")
gap_hash=$(printf '%s' "$gap_body" | sha256sum | cut -c1-64)
{ jq -c 'select(.type != "end")' audit.jsonl
  jq -cn --arg b "$gap_body" --arg h "$gap_hash" '{type: "certificate", committed_at: "", committed_at_ms: 0, hash: $h, body: $b}'
  jq -cn --arg h "$gap_hash" --arg d "${GAP%|*}" --argjson seq "${GAP#*|}" '{type: "event", at: "", at_ms: 0, id: 999998,
    kind: "committed", intent: "refund:order-124", domain: $d, seq: $seq, generation: 1, actor: "mallory",
    detail: {certificate: $h}}'; } >gap.jsonl
with_end gap.jsonl
export_problems gap.jsonl
expect_eq "$RC $PROBLEMS" "1 $(pairs "" impossible_history "$gap_hash" not_admitted)" \
  "verify fails an export with a certificate and its committed event added at a seq no admission handed it"

# A time index damaged in the file (a page of it as an older ledger had it)
# would leave records out of a dump that looks whole: export counts the
# tables themselves before the end record, and writes no complete dump.
"$FIXTURE" bulk "$WORK/index-old.sqlite" 1 && "$FIXTURE" bulk "$WORK/index-new.sqlite" 2 ||
  fail "could not write the two small ledgers"
for f in index-old index-new; do q "$WORK/$f.sqlite" "PRAGMA wal_checkpoint(TRUNCATE)" >/dev/null; done
index_root=$(q "$WORK/index-new.sqlite" "SELECT rootpage FROM sqlite_master WHERE name = 'certificates_by_time'")
page_size=$(q "$WORK/index-new.sqlite" "PRAGMA page_size")
expect_eq "$(q "$WORK/index-old.sqlite" "SELECT rootpage FROM sqlite_master WHERE name = 'certificates_by_time'")" \
  "$index_root" "both ledgers keep the index at one page"
dd if="$WORK/index-old.sqlite" of="$WORK/index-new.sqlite" bs="$page_size" skip=$((index_root - 1)) \
  seek=$((index_root - 1)) count=1 conv=notrunc status=none
expect_eq "$(q "$WORK/index-new.sqlite" "SELECT (SELECT count(*) FROM certificates NOT INDEXED) || ' ' ||
                                                (SELECT count(*) FROM certificates INDEXED BY certificates_by_time
                                                  WHERE committed_at > -1)")" \
  "2 1" "the damaged index lists one certificate of two"
run "$EF" export --db "$WORK/index-new.sqlite" --out "$WORK/index.jsonl"
expect_match "$RC $ERR" "^2 effectfence export: reading the ledger: the certificates table holds 2 row\(s\) for this dump, but its time index gave 1: the index is damaged" \
  "export refuses to vouch for a dump read through a damaged index"
expect_eq "$(ls "$WORK" | grep -c '^index.jsonl')" 0 "and leaves no dump behind"
# Through a symlink to a regular file, the file it names keeps the last good
# dump, and the link stays a link.
echo "the last good dump" >"$WORK/index-kept.jsonl"
ln -s index-kept.jsonl "$WORK/index-link.jsonl"
run "$EF" export --db "$WORK/index-new.sqlite" --out "$WORK/index-link.jsonl"
expect_eq "$RC|$(stat -c %F "$WORK/index-link.jsonl")|$(cat "$WORK/index-kept.jsonl")|$(ls "$WORK" | grep -c partial)" \
  "2|symbolic link|the last good dump|0" \
  "a failed export through a symlink to a regular file leaves that file as it was, and the link"
# A link to nothing yet gets its file whole or not at all, like any other.
ln -s index-dangling-target.jsonl "$WORK/index-dangling.jsonl"
run "$EF" export --db "$WORK/index-new.sqlite" --out "$WORK/index-dangling.jsonl"
expect_eq "$RC|$(ls "$WORK" | grep -c '^index-dangling-target.jsonl')|$(ls "$WORK" | grep -c partial)" "2|0|0" \
  "a failed export through a link to nothing yet creates nothing there"
run "$EF" export --db "$LEDGER" --out "$WORK/index-link.jsonl"
expect_eq "$RC|$(stat -c %F "$WORK/index-link.jsonl")|$(tail -n +2 "$WORK/index-kept.jsonl" | wc -l)" \
  "0|symbolic link|$(q "$LEDGER" "SELECT (SELECT count(*) FROM certificates) + (SELECT count(*) FROM events) + 1")" \
  "a whole one replaces the file the link names, and keeps the link"
run "$EF" export --db "$WORK/index-new.sqlite"
expect_no_match "$OUT" '"type":"end"' "nor an end record on stdout, so verify --export calls the dump cut short"
rm -f "$WORK"/index-*.sqlite*

head -n 4 audit.jsonl >cut.jsonl
export_problems cut.jsonl
expect_eq "$RC $PROBLEMS" "1 $(pairs "" truncated)" "verify fails an export cut short"
expect_match "$(jq -r '.problems[0].message' <<<"$OUT")" '^no end record: the dump is truncated' "and says it is truncated"
run "$EF" verify --export audit.csv
expect_eq "$RC $ERR" "2 effectfence verify: reading the export: audit.csv is a CSV export: verify reads JSONL dumps only (effectfence export --format jsonl)" \
  "verify refuses a CSV export as the wrong input, not as tampering"
run "$EF" verify --export "$LEDGER"
expect_eq "$RC $ERR" "2 effectfence verify: reading the export: $LEDGER is an SQLite database, not an export: verify a ledger with --db $LEDGER" \
  "verify refuses a ledger given as an export as the wrong input, not as tampering"
: >empty.jsonl
export_problems empty.jsonl
expect_eq "$RC $PROBLEMS" "1 $(pairs "" not_an_export)" "verify fails an empty file"
tail -n +2 audit.jsonl >headless.jsonl
export_problems headless.jsonl
expect_eq "$RC $(jq -c '[.problems[] | select(.kind == "not_an_export") | .line]' <<<"$OUT")" \
  "1 [1]" "verify fails an export without its header, at line 1"
# Export format 1 (effectfence before end records): header format 1, no end record.
jq -c 'select(.type != "end") | if .type == "export" then .format = 1 else . end' audit.jsonl >format1.jsonl
export_problems format1.jsonl
expect_eq "$RC $PROBLEMS" "1 $(pairs "" truncated)" "verify fails a format 1 export: nothing shows it is whole"
expect_match "$(jq -r '.problems[0].message' <<<"$OUT")" 'export format 1, written by an effectfence from before end records' \
  "and says it was written before end records"
# A header whose format is newer than this effectfence, or not a version number.
for format in 3 '"2"' 0; do
  jq -c --argjson f "$format" 'if .type == "export" then .format = $f else . end' audit.jsonl >format-odd.jsonl
  export_problems format-odd.jsonl
  expect_eq "$RC $PROBLEMS" "1 $(pairs "" bad_record)" "verify fails an export whose header's format is $format"
done
expect_match "$(jq -r '.problems[0].message' <<<"$OUT")" "^the export header's format is not a version number: 0" \
  "and says what is wrong with it"
jq -c 'if .type == "export" then .format = 3 else . end' audit.jsonl >format3.jsonl
export_problems format3.jsonl
expect_match "$(jq -r '.problems[0].message' <<<"$OUT")" '^the dump is in export format 3, newer than this effectfence \(2\) reads' \
  "a newer format is named as such"
(cat audit.jsonl; head -2 audit.jsonl | tail -1) >after-end.jsonl
export_problems after-end.jsonl
expect_match "$(jq -r '.problems[] | select(.kind == "bad_record") | .message' <<<"$OUT")" \
  '^a record after the end record' "verify fails a record after the end record"

# A second, properly hashed certificate for the charge's (domain, seq).
body=$(jq -r --arg h "$CHARGE" 'select(.hash == $h) | .body' audit.jsonl)
twin=$(jq -cS '.result.charge_id = "ch_twin"' <<<"$body")
twin_hash=$(printf '%s' "$twin" | sha256sum | cut -c1-64)
{ cat audit.jsonl
  jq -cn --arg b "$twin" --arg h "$twin_hash" '{type: "certificate", committed_at: "", committed_at_ms: 0, hash: $h, body: $b}'
} >twin.jsonl
with_end twin.jsonl
export_problems twin.jsonl
expect_eq "$RC $PROBLEMS" "1 $(pairs "$twin_hash" duplicate_seq "$twin_hash" missing_event)" \
  "verify fails two certificates for one (domain, seq)"

# export --since: a parent committed before the window. A chain of two on a
# new ledger, the second committed after the first, and after its own
# admission (outside a window that starts at its commit).
CHAIN=$WORK/chain.sqlite
coproc CHAIN_SESSION { exec "$FIXTURE" session "$CHAIN"; }
session_pid=$CHAIN_SESSION_PID
read -r -t 60 ready <&"${CHAIN_SESSION[0]}" || true
for step in "prepare charge:order-300" "commit charge:order-300" "sleep" "prepare receipt:order-300" "sleep" "commit receipt:order-300"; do
  if [[ $step == sleep ]]; then sleep 0.05; continue; fi
  echo "$step" >&"${CHAIN_SESSION[1]}"
  read -r -t 60 answer <&"${CHAIN_SESSION[0]}" || true
done
echo quit >&"${CHAIN_SESSION[1]}"
wait "$session_pid" 2>/dev/null
CHAIN_CHARGE=$(cert_of charge:order-300 "$CHAIN")
CHAIN_RECEIPT=$(cert_of receipt:order-300 "$CHAIN")
expect_eq "$(q "$CHAIN" "SELECT parent FROM certificates WHERE hash = '$CHAIN_RECEIPT'")" "$CHAIN_CHARGE" "the receipt is chained to the charge"
receipt_ms=$(q "$CHAIN" "SELECT committed_at FROM certificates WHERE hash = '$CHAIN_RECEIPT'")
since="$(date -u -d "@$((receipt_ms / 1000))" +%Y-%m-%dT%H:%M:%S).$(printf %03d $((receipt_ms % 1000)))Z"
expect_eq "$(q "$CHAIN" "SELECT count(*) FROM certificates WHERE committed_at < $receipt_ms")" 1 "the charge was committed before the receipt"
"$EF" export --db "$CHAIN" --since "$since" >partial.jsonl
expect_eq "$(jq -c 'select(.type == "certificate" or .kind == "committed") | .hash // .detail.certificate' -r partial.jsonl | sort | uniq -c | awk '{print $1 " " $2}')" \
  "2 $CHAIN_RECEIPT" "export --since has the receipt and its committed event, not the charge"
run "$EF" verify --export partial.jsonl --json
expect_eq "$RC $(jq -c '[.ok, .parents_outside_export]' <<<"$OUT")" "0 [true,1]" \
  "in an export --since, a parent before the window is counted, not a problem"
# ... so a header's since is one time, written both ways, that every record
# is at or after: edited, it would turn the check of a deleted parent off.
jq -c 'if .type == "export" then .since = "whenever" else . end' partial.jsonl >since-edited.jsonl
export_problems since-edited.jsonl
expect_eq "$RC $PROBLEMS" "1 $(pairs "" bad_record "" impossible_history "$CHAIN_RECEIPT" missing_parent "$CHAIN_RECEIPT" not_admitted)" \
  "verify fails an export whose since was edited, and checks its parents and admissions as in a full dump"
jq -c 'if .type == "export" then .since_ms = .since_ms + 1 | .since = "'"$(date -u -d "@$(((receipt_ms + 1) / 1000))" +%Y-%m-%dT%H:%M:%S).$(printf %03d $(((receipt_ms + 1) % 1000)))Z"'" else . end' \
  partial.jsonl >since-late.jsonl
export_problems since-late.jsonl
expect_eq "$RC $(jq -c '[.[][1]] | unique' <<<"$PROBLEMS")" '1 ["bad_record"]' \
  "verify fails an export whose since is after its own records"
(cat audit.jsonl; echo "this is not json") >garbage.jsonl
run "$EF" verify --export garbage.jsonl --json
expect_eq "$RC $(jq -c '[.problems[0].kind, .problems[0].line]' <<<"$OUT")" "1 [\"bad_record\",$(wc -l <garbage.jsonl)]" \
  "verify reports a line that is not a record"
run "$EF" verify --export "$WORK/none.jsonl"
expect_match "$RC $ERR" "^2 effectfence verify: opening the export: cannot read " "verify cannot run without its export"

finish
