# Shared by the operations test scripts: checks that report every failure
# and a scratch directory removed on exit.
# REQUIRES: set by the caller: EF (effectfence), FIXTURE (ledger_fixture), SQLITE3.

FAILURES=0
CHECKS=0

WORK=$(mktemp -d "${TMPDIR:-/tmp}/effectfence-ops-XXXXXX")
cleanup() {
  local status=$?
  # Only processes this script started, by their id.
  # (session_pid: kept by the scripts, since bash unsets SESSION_PID once it
  # has reaped the coprocess.)
  local pid=${session_pid:-${SESSION_PID:-}}
  if [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null; then
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  fi
  if [[ $FAILURES -eq 0 && $status -eq 0 ]]; then
    rm -rf "$WORK"
  else
    echo "scratch directory kept for inspection: $WORK" >&2
  fi
}
trap cleanup EXIT

fail() {
  FAILURES=$((FAILURES + 1))
  echo "FAIL: $*" >&2
}

pass() {
  echo "ok: $*"
}

# expect_eq ACTUAL EXPECTED WHAT
expect_eq() {
  CHECKS=$((CHECKS + 1))
  if [[ "$1" == "$2" ]]; then pass "$3"; else fail "$3: expected [$2], got [$1]"; fi
}

# expect_match TEXT REGEX WHAT (extended regex, grep -E)
expect_match() {
  CHECKS=$((CHECKS + 1))
  if grep -Eq -- "$2" <<<"$1"; then pass "$3"; else fail "$3: no match for /$2/ in: $1"; fi
}

expect_no_match() {
  CHECKS=$((CHECKS + 1))
  if grep -Eq -- "$2" <<<"$1"; then fail "$3: unexpected match for /$2/ in: $1"; else pass "$3"; fi
}

# count_matches TEXT REGEX: how many lines match.
count_matches() {
  grep -Ec -- "$2" <<<"$1" || true
}

# q DB SQL: one query through the real sqlite3 shell, list mode, no header.
q() {
  "$SQLITE3" -batch -noheader "$1" ".timeout 5000" "$2"
}

finish() {
  echo "$CHECKS checks, $FAILURES failed"
  [[ $FAILURES -eq 0 && $CHECKS -gt 0 ]]
}

# How effectfence names this host for liveness: its name, plus the PID
# namespace outside the initial one (whose inode is fixed).
holder_host() {
  local ns
  ns=$(readlink /proc/self/ns/pid)
  ns=${ns#pid:[}
  ns=${ns%]}
  if [[ $ns == 4026531836 ]]; then cat /proc/sys/kernel/hostname; else echo "$(cat /proc/sys/kernel/hostname)/pidns:$ns"; fi
}
