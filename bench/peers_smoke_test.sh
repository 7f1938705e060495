#!/usr/bin/env bash
# bench.peers_smoke: effectfence_bench at a tiny size with the Redis and
# PostgreSQL fences beside serve, the plot and the growth mode; the JSON must have every series with pairs in it. A peer
# whose server is not installed is reported as SKIP with the bench's own
# reason, never passed over. Negative controls: a peer pointed at a port
# where nothing listens must fail the run with an error naming it, and the
# checker must reject a report with a series emptied.
#   bench/peers_smoke_test.sh BENCH_BINARY EFFECTFENCE_BINARY
# Its files go in $TMPDIR (or /tmp): as root, the PostgreSQL server runs as
# a user of its own, who must be able to reach them.
set -euo pipefail

bench=$1
bin=$2
work=$(mktemp -d -t peers-smoke-XXXXXX)
chmod 0711 "$work"
trap 'rm -rf "$work"' EXIT
failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }

tiny=(--bin "$bin" --levels 2 --seconds 0.2 --rounds 1 --warmup 0 --dir "$work")

# The series a report must have pairs in; the peers only when measured.
# Prints what is missing; exit 1 if anything is.
check_report() {
  jq -r '
    def series($run): ["bare_rows", "fence_only", "floor_server"]
      + (if $run.peers.redis_fence.measured then ["redis_fence"] else [] end)
      + (if $run.peers.postgresql_fence.measured then ["postgresql_fence"] else [] end);
    (.runs // [.])[] as $run
    | ( ( $run.levels[] as $level
          | ( (if ($level.pairs // 0) > 0 then empty else "serve" end),
              (series($run)[] | select(($level[.].pairs.count // 0) <= 0)) )
          | "\($run.intent_names), \($level.in_flight) in flight: \(.) has no pairs" ),
        ( (series($run) + ["serve"])[] | select(($run.ledger_bytes_per_pair[.] // 0) <= 0)
          | "\($run.intent_names): \(.) has no ledger bytes per pair" ) )' "$1" | tee "$1.missing"
  [[ ! -s "$1.missing" ]]
}

# ---- the run with every series ---------------------------------------------
plot=()
if command -v gnuplot >/dev/null; then
  plot=(--plot "$work/peers.png")
else
  echo "SKIP plot: gnuplot is not installed (tools/install-deps --bench)"
fi
rc=0
"$bench" "${tiny[@]}" --intent-names scattered --json "${plot[@]}" >"$work/report.json" 2>"$work/stderr" || rc=$?
if ((rc)); then
  cat "$work/stderr" >&2
  tail -n 20 "$work"/effectfence-bench-*/{redis,postgres}.log >&2 2>/dev/null || true
  fail "the tiny run with the peers exited $rc"
fi
for peer in redis_fence postgresql_fence; do
  status=$(jq -r "(.runs // [.])[0].peers.$peer.status" "$work/report.json")
  measured=$(jq -r "(.runs // [.])[0].peers.$peer.measured" "$work/report.json")
  if [[ "$measured" == true ]]; then
    echo "ok   $peer measured at $status"
  elif [[ "$status" == SKIPPED:* ]]; then
    echo "SKIP $peer: ${status#SKIPPED: }"
  else
    fail "$peer neither measured nor skipped with a reason: $status"
  fi
done
check_report "$work/report.json" || fail "series without pairs (above)"
if ((${#plot[@]})); then
  [[ "$(head -c 4 "$work/peers.png" | od -An -c | tr -d ' ')" == "211PNG" ]] || fail "--plot wrote no PNG"
fi

# ---- negative control: the checker rejects an emptied series ---------------
jq '.levels[0].bare_rows.pairs.count = 0' "$work/report.json" >"$work/emptied.json"
if check_report "$work/emptied.json" >/dev/null; then
  fail "the checker accepted a report whose bare rows had no pairs"
fi

# ---- negative controls: a peer where nothing listens is an error by name ----
if "$bench" "${tiny[@]}" --floor none --postgres none --redis 127.0.0.1:1 >/dev/null 2>"$work/redis.err"; then
  fail "--redis 127.0.0.1:1 (nothing listening) did not fail the run"
fi
grep -q "redis fence: cannot connect to 127.0.0.1:1" "$work/redis.err" ||
  fail "--redis 127.0.0.1:1 failed without naming the redis fence: $(cat "$work/redis.err")"
if "$bench" "${tiny[@]}" --floor none --redis none --postgres "postgresql://bench@127.0.0.1:1/postgres" \
    >/dev/null 2>"$work/postgres.err"; then
  fail "--postgres at port 1 (nothing listening) did not fail the run"
fi
grep -q "postgresql fence: cannot connect to" "$work/postgres.err" ||
  fail "--postgres at port 1 failed without naming the postgresql fence: $(cat "$work/postgres.err")"

# ---- a peer not installed is skipped by name, with the reason --------------
rc=0
env PATH=/nonexistent "$bench" "${tiny[@]}" --seconds 0.1 --floor none --postgres none --json >"$work/skipped.json" \
  2>"$work/skipped.err" || rc=$?
((rc == 0)) || fail "a run without redis-server on PATH exited $rc: $(cat "$work/skipped.err")"
jq -e '.peers.redis_fence.measured == false and (.peers.redis_fence.status | startswith("SKIPPED: redis-server"))' \
  "$work/skipped.json" >/dev/null || fail "redis-server missing, but the report does not say it was skipped"
grep -q "SKIPPED: redis-server" "$work/skipped.err" || fail "redis-server missing, and nothing said so on stderr"

# ---- the growth mode ----------------------------------------------------------
rc=0
"$bench" --bin "$bin" --dir "$work" --pairs 40 --windows 4 --levels 4 --json >"$work/growth.json" \
  2>"$work/growth.err" || rc=$?
if ((rc == 0)); then
  jq -e '(.windows | length) == 4 and all(.windows[]; .pairs.count > 0 and .server_rss_kib > 0
         and .ledger_bytes > 0) and .ledger_bytes_per_pair > 0' "$work/growth.json" >/dev/null ||
    fail "growth mode: a window without pairs, RSS or ledger size"
  # The bare rows take each window's pairs too, and the writer's CPU is read.
  jq -e 'all(.windows[]; .bare_rows.count == .pairs.count and .bare_rows.per_second > 0
         and .writer_cpu_us_per_pair > 0 and .writer_reads_per_pair >= 0) and .bare_rows_last_over_first > 0
         and .bare_rows_bytes_per_pair > 0' "$work/growth.json" >/dev/null ||
    fail "growth mode: a window without the bare rows' pairs or the writer's CPU"
else
  fail "growth mode exited $rc: $(cat "$work/growth.err")"
fi

if ((failures)); then
  echo "$failures failure(s)" >&2
  exit 1
fi
echo "bench.peers_smoke: ok"
