# Shared by the runbook tests (runbook_test.sh with sqlite3,
# runbook_postgres_test.sh with psql): the page's marked blocks, running
# them, the live fence they run beside, and the checks every block uses.
# REQUIRES: lib.sh sourced; set by the caller: DOC, EF, FIXTURE, LEDGER,
# SHELL_TOOL (the sqlite3 or psql binary), MARKER (the comment naming a
# block, e.g. runbook-test), QUERY_LANG (the fence of a query block: sql or
# psql), and the functions run_query_block FILE (output to $WORK/out and
# $WORK/err) and ledger_q SQL (one query's rows, '|' between fields).

BLOCKS=$WORK/blocks
RUN=$WORK/run  # the working directory of the blocks (backups land here)
mkdir -p "$BLOCKS" "$RUN"

# Writes each marked block to $BLOCKS/NAME.LANG and prints NAME.LANG in page
# order. A query block without a marker, a marker without a block right
# after it, or a name used twice fails.
extract_blocks() {
  awk -v dir="$BLOCKS" -v marker="$MARKER" -v qlang="$QUERY_LANG" '
    function complain(msg) { print "OPERATIONS.md line " NR ": " msg > "/dev/stderr"; bad = 1 }
    $0 ~ ("^<!-- " marker ": [a-z0-9-]+ -->$") {
      if (pending != "") complain("marker " pending " is not followed by a code block")
      pending = $3; next
    }
    !inblock && /^```/ {
      inblock = 1; lang = substr($0, 4); capture = 0
      if (pending != "") {
        if (lang != qlang && lang != "sh") complain("block " pending " must be ```" qlang " or ```sh")
        if (pending in seen) complain("duplicate block name " pending)
        seen[pending] = 1; file = dir "/" pending "." lang; capture = 1
        printf "" > file
        print pending "." lang
        pending = ""
      } else if (lang == qlang) {
        complain("a ```" qlang " block without a <!-- " marker ": NAME --> marker")
      }
      next
    }
    inblock && /^```$/ { inblock = 0; if (capture) close(file); next }
    inblock { if (capture) print > file; next }
    pending != "" && NF > 0 { complain("marker " pending " is not directly followed by a code block"); pending = "" }
    END { if (pending != "") complain("marker " pending " at the end"); exit bad }
  ' "$DOC"
}

# run_block NAME.LANG: sets OUT, ERR, RC.
run_block() {
  local block=$1 file=$BLOCKS/$1
  case "$block" in
    *.sh)
      (cd "$RUN" && PATH="$(dirname "$EF"):$(dirname "$SHELL_TOOL"):$PATH" LEDGER="$LEDGER" bash -e "$file") \
        >"$WORK/out" 2>"$WORK/err"
      ;;
    *) (cd "$RUN" && run_query_block "$file") >"$WORK/out" 2>"$WORK/err" ;;
  esac
  RC=$?
  OUT=$(cat "$WORK/out")
  ERR=$(cat "$WORK/err")
}

expect_success() {
  expect_eq "$RC" 0 "$1 runs"
  expect_eq "$ERR" "" "$1 prints no error"
}

state_of() { ledger_q "SELECT state FROM intents WHERE intent = '$1'"; }
cert_of() { ledger_q "SELECT hash FROM certificates WHERE intent = '$1'"; }

# run_runbook EXPECTED WHAT: checks that the page's marked blocks are EXPECTED
# (names, in page order), then runs each, after its before_NAME if there is
# one, and holds it to its check_NAME. Returns non-zero if the page cannot
# be read. REQUIRES: the ledger written and the live session started.
run_runbook() {
  local expected=$1 what=$2 blocks block name check before
  if ! blocks=$(extract_blocks); then
    fail "OPERATIONS.md has malformed $what blocks"
    return 1
  fi
  expect_eq "$(tr '\n' ' ' <<<"$blocks" | sed 's/ $//')" "$expected" "the page's $what blocks are the ones this test checks, in order"
  for block in $blocks; do
    name=${block%.*}
    check=check_${name//-/_}
    if ! declare -F "$check" >/dev/null; then
      fail "block $block has no check ($check)"
      continue
    fi
    before=before_${name//-/_}
    if declare -F "$before" >/dev/null; then "$before"; fi
    BEFORE=$(fingerprint)
    echo "--- $block"
    run_block "$block"
    "$check"
  done
}

# --- a live fence, as a running server holds one ----------------------------

start_session() {
  coproc SESSION { exec "$FIXTURE" session "$LEDGER" 2>"$WORK/session.err"; }
  # Bash unsets SESSION_PID as soon as it reaps the coprocess: keep the pid.
  session_pid=$SESSION_PID
  local ready=""
  read -r -t 60 ready <&"${SESSION[0]}" || true
  expect_eq "$ready" "ready" "a live fence is running on the ledger"
}

# session COMMAND INTENT: the live fence's one-line answer.
session() {
  local reply=""
  echo "$*" >&"${SESSION[1]}"
  read -r -t 60 reply <&"${SESSION[0]}" || true
  echo "$reply"
}

# Checks whose blocks give the same answer on both engines (the ledger
# fixture is the same); each engine's script keeps the ones that differ.

OLD_INTENTS="'charge:order-100','charge:order-101','charge:order-102','charge:order-103','charge:order-104','receipt:order-101'"

check_what_is_fenced() {
  expect_success "what-is-fenced"
  expect_eq "$(cut -d'|' -f1,2 <<<"$OUT" | sort | tr '\n' ' ')" \
    "charge:order-124|failed charge:order-125|unknown charge:order-126|failed " \
    "what-is-fenced lists exactly the failed and unknown intents"
  expect_match "$OUT" '^charge:order-124\|failed\|charge\|\{"amount_cents":4900,"currency":"EUR","order":"124"\}\|billing-agent\|[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9:.]+\|aborted: provider timed out' \
    "what-is-fenced shows tool, args, agent, since and why"
}

check_intent_history() {
  expect_success "intent-history"
  expect_eq "$(cut -d'|' -f3 <<<"$OUT" | tr '\n' ' ')" "admitted aborted " "intent-history tells the story in order"
  expect_match "$OUT" 'aborted\|billing-agent\|.*provider timed out' "intent-history shows who and why"
}

before_clear() {
  expect_eq "$(session prepare charge:order-124)" "prior_failure" "the live fence refuses the fenced intent"
}

check_clear_refused_done() {
  expect_refused "clear-refused-done" "effectfence: cannot clear: only failed or unknown intents can be cleared"
  expect_eq "$(state_of charge:order-123)" "done" "a done intent stays done"
}

check_clear_refused_in_flight() {
  expect_refused "clear-refused-in-flight" "effectfence: cannot clear: only failed or unknown intents can be cleared"
  expect_eq "$(state_of payout:batch-9)" "in_flight" "an in-flight intent stays in flight"
}

check_clear_refused_unknown() {
  expect_refused "clear-refused-unknown" "effectfence: cannot clear: no such intent"
}

check_clear_by_hand_refused() {
  expect_refused "clear-by-hand-refused" "effectfence: clear an intent with INSERT INTO clears\\(intent, operator, reason\\)"
  expect_match "$ERR" "effectfence: an in-flight, failed or unknown intent cannot be deleted" \
    "clear-by-hand-refused: deleting a fenced intent is refused"
  if declare -F check_clear_by_hand_refused_in_dialect >/dev/null; then check_clear_by_hand_refused_in_dialect; fi
  expect_eq "$(state_of charge:order-126)" "failed" "a fenced intent stays fenced after hand edits"
}

check_domain_sequences() {
  expect_success "domain-sequences"
  expect_match "$OUT" "^order:123\|2\|$(cert_of receipt:order-123)\|0\|" "domain-sequences: order:123 at seq 2, latest the receipt"
  expect_match "$OUT" "^payouts\|2\|$(cert_of payout:batch-8)\|1\|" "domain-sequences: payouts has one in flight"
}

check_counters() {
  expect_success "counters"
  local from_cli
  from_cli=$("$EF" stats --db "$LEDGER" --json | jq -r '.ledger | [.admitted, .replayed, (.refused | [.[]] | add),
      .refused.stale_read_set, .refused.domain_race, .refused.in_flight, .refused.prior_failure,
      .refused.payload_mismatch, .prevented, .committed, .aborted] | map(tostring) | join("|")')
  expect_eq "$OUT" "$from_cli" "the stats view agrees with effectfence stats"
}

# --- Metrics: stats --prometheus (both ledgers) ------------------------------

# The value of one series in $RUN/effectfence.prom ("" if absent).
prom_value() {
  local line
  line=$(grep -F -- "$1 " "$RUN/effectfence.prom" | head -1)
  echo "${line##* }"
}

check_metrics() {
  expect_success "metrics"
  local prom=$RUN/effectfence.prom ledger="ledger=\"$LEDGER\"" state
  if command -v promtool >/dev/null; then
    expect_eq "$(promtool check metrics <"$prom" 2>&1; echo "exit $?")" "exit 0" "metrics: promtool accepts the text"
  else
    fail "metrics: promtool is needed (tools/install-deps --tests installs Debian's prometheus)"
  fi
  expect_eq "$(grep -v '^#' "$prom" | grep -cvF -- "{$ledger")" 0 "metrics: every sample names its ledger first"
  for state in in_flight done failed unknown cleared; do
    expect_eq "$(prom_value "effectfence_ledger_intents{$ledger,state=\"$state\"}")" \
      "$(ledger_q "SELECT count(*) FROM intents WHERE state = '$state'")" "metrics: intents $state as in the table"
  done
  expect_eq "$(prom_value "effectfence_ledger_intents{$ledger,state=\"in_flight\"}")" 1 "metrics: the live payout is in flight"
  expect_eq "$(prom_value "effectfence_ledger_admissions_total{$ledger}")" \
    "$(ledger_q "SELECT sum(value) FROM counters WHERE name = 'admitted'")" "metrics: admissions as in the counters table"
  expect_eq "$(prom_value "effectfence_ledger_refusals_total{$ledger,reason=\"in_flight\"}")" \
    "$(ledger_q "SELECT sum(value) FROM counters WHERE name = 'refused_in_flight'")" "metrics: in_flight refusals as counted"
  expect_eq "$(prom_value "effectfence_ledger_certificates{$ledger}")" \
    "$(ledger_q "SELECT count(*) FROM certificates")" "metrics: certificates as in the table"
}
