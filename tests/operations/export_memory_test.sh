#!/usr/bin/env bash
# export and verify run in constant memory: their peak RSS on a ledger of a
# million rows and a half (EFFECTFENCE_OPS_BULK certificates, each with its
# admission and its commit event) stays
# within a few MiB of their peak on a ledger five times smaller.
#
# usage: export_memory_test.sh EFFECTFENCE OPS_LEDGER_FIXTURE SQLITE3
set -uo pipefail

EF=$(realpath "$1")
FIXTURE=$(realpath "$2")
SQLITE3=$(realpath "$3")
source "$(dirname "$0")/lib.sh"
command -v jq >/dev/null || { echo "FAIL: jq is needed to read effectfence's JSON output" >&2; exit 1; }

LARGE=${EFFECTFENCE_OPS_BULK:-500000}
# verify's SQLite caches (its connection's pages, the sorters of its
# queries) fill over the first ~20,000 certificates and then stay: about
# 6 MiB, 9 MiB under AddressSanitizer. The smaller ledger must fill them
# too, or their filling reads as growth.
SMALL=$((LARGE / 5))
# Allocator slack: 4 MiB over 80% of the rows is ~50 bytes a row, far
# below what holding the rows would take (hundreds of MiB).
SLACK_KIB=4096

# peak_rss NAME CMD...: runs CMD with stdout to NAME.out, prints its peak RSS in KiB.
peak_rss() {
  local name=$1
  shift
  "$FIXTURE" maxrss "$WORK/$name.rss" "$@" >"$WORK/$name.out" 2>"$WORK/$name.err"
  local rc=$?
  [[ $rc -eq 0 ]] || fail "$name exited $rc: $(cat "$WORK/$name.err")"
  cat "$WORK/$name.rss"
}

for n in "$SMALL" "$LARGE"; do
  "$FIXTURE" bulk "$WORK/bulk-$n.sqlite" "$n" || { fail "could not write a ledger of $n certificates"; finish; exit 1; }
  expect_eq "$(q "$WORK/bulk-$n.sqlite" "SELECT (SELECT count(*) FROM certificates) + (SELECT count(*) FROM events)")" \
    "$((3 * n))" "a ledger of $((3 * n)) rows"
done

small_export=$(peak_rss export-small "$EF" export --db "$WORK/bulk-$SMALL.sqlite")
large_export=$(peak_rss export-large "$EF" export --db "$WORK/bulk-$LARGE.sqlite")
expect_eq "$(wc -l <"$WORK/export-large.out")" "$((3 * LARGE + 2))" "export writes every row of the large ledger, the header and the end record"
echo "export peak RSS: $small_export KiB for $((3 * SMALL)) rows, $large_export KiB for $((3 * LARGE)) rows"
CHECKS=$((CHECKS + 1))
if ((large_export - small_export < SLACK_KIB)); then
  pass "export memory does not grow with the ledger"
else
  fail "export peak RSS grew by $((large_export - small_export)) KiB from $((3 * SMALL)) to $((3 * LARGE)) rows"
fi

# Stopped mid-dump, export --out leaves neither a dump nor its partial file.
"$EF" export --db "$WORK/bulk-$LARGE.sqlite" --out "$WORK/stopped.jsonl" 2>"$WORK/stopped.err" &
export_pid=$!
for _ in $(seq 1 2000); do
  compgen -G "$WORK/stopped.jsonl.partial-*" >/dev/null && break
  sleep 0.005
done
kill -TERM "$export_pid"
wait "$export_pid"
expect_eq "$? $(compgen -G "$WORK/stopped.jsonl*" | wc -l)" "143 0" \
  "export stopped by SIGTERM mid-dump ends by the signal and leaves no file behind"

small_verify=$(peak_rss verify-small "$EF" verify --db "$WORK/bulk-$SMALL.sqlite" --json)
large_verify=$(peak_rss verify-large "$EF" verify --db "$WORK/bulk-$LARGE.sqlite" --json)
expect_eq "$(jq -c '[.ok, .certificates]' "$WORK/verify-large.out")" "[true,$LARGE]" "verify checks every certificate of the large ledger"
echo "verify peak RSS: $small_verify KiB for $SMALL certificates, $large_verify KiB for $LARGE"
CHECKS=$((CHECKS + 1))
if ((large_verify - small_verify < SLACK_KIB)); then
  pass "verify --db memory does not grow with the ledger"
else
  fail "verify peak RSS grew by $((large_verify - small_verify)) KiB from $SMALL to $LARGE certificates"
fi

finish
