#!/usr/bin/env bash
# Runs the ```sh blocks of docs/OPERATIONS.md's "Signing certificates"
# (each marked "<!-- signing-test: NAME -->") with the real effectfence, in
# page order, against a ledger written by real wrap processes, and checks
# what each did: keygen, verify with the key, rotation (the servers
# restarted with the new key between the blocks, as the page says), and
# the export checked offline with both keys.
#   runbook_sign_test.sh EFFECTFENCE SQLITE3 OPERATIONS.md
set -uo pipefail
EF=$(realpath "$1")
SQLITE3=$(realpath "$2")
DOC=$3
FIXTURE=unused
source "$(dirname "$0")/../operations/lib.sh"
LEDGER=$WORK/ledger.sqlite
SHELL_TOOL=$SQLITE3
MARKER=signing-test
QUERY_LANG=none  # the section has only ```sh blocks
run_query_block() { return 1; }
ledger_q() { q "$LEDGER" "$1"; }
source "$(dirname "$0")/../operations/runbook_lib.sh"
export EFFECTFENCE_RESULT_TTL_SECS=315360000

# commit KEYFILE|- ORDER...: one wrap process in front of demo-server.
commit() {
  local key=$1
  shift
  local sign=() o
  [[ "$key" != - ]] && sign=(--signing-key "$key")
  {
    printf '%s\n' '{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"runbook","version":"1"}}}' \
      '{"jsonrpc":"2.0","method":"notifications/initialized"}'
    for o in "$@"; do
      printf '{"jsonrpc":"2.0","id":"%s","method":"tools/call","params":{"name":"charge","arguments":{"order":"%s","amount_cents":4900}}}\n' "$o" "$o"
    done
  } | "$EF" wrap --db "$LEDGER" "${sign[@]}" -- "$EF" demo-server --charges "$WORK/charges.sqlite" >/dev/null 2>"$WORK/wrap.err" ||
    fail "wrap: $(cat "$WORK/wrap.err")"
}

# Two certificates from before signing began.
commit - o-1 o-2

check_signing_keygen() {
  expect_success "signing-keygen"
  expect_eq "$(stat -c %a "$RUN/fence.key")" 600 "signing-keygen: the private key is mode 0600"
  expect_match "$OUT" '^key id [0-9a-f]{16}$' "signing-keygen: prints the key id"
  KEY_ID=$(sed -n 's/^key id //p' <<<"$OUT")
  # The servers restarted with the key, as the page says: three signed commits.
  commit "$RUN/fence.key" o-3 o-4 o-5
  expect_match "$(cat "$WORK/wrap.err")" "certificates signed with key $KEY_ID\)" "the startup log names the key id"
}

check_signing_verify() {
  expect_success "signing-verify"
  expect_match "$OUT" "^signatures: 3 signed \(3 verified with key\(s\) $KEY_ID, 0 bad or by another key\), 2 unsigned from before signing began$" \
    "signing-verify: the count the page shows"
}

check_signing_rotate() {
  expect_success "signing-rotate"
  NEW_ID=$(sed -n 's/^key id //p' <<<"$OUT")
  commit "$RUN/fence-2027.key" o-6
  # Before the old public key is given too, the old signatures are an unknown key's.
  expect_eq "$("$EF" verify --db "$LEDGER" --public-key "$RUN/fence-2027.key.pub" >/dev/null 2>&1; echo $?)" 1 \
    "signing-rotate: verify with the new key alone fails the old signatures"
}

check_signing_verify_rotated() {
  expect_eq "$RC" 0 "signing-verify-rotated runs"
  # export --out reports what it wrote on stderr; anything else is an error.
  expect_eq "$(grep -Ev '^effectfence export: wrote [0-9]+ certificate\(s\) and [0-9]+ event\(s\) to ' <<<"$ERR")" "" \
    "signing-verify-rotated prints no error"
  expect_eq "$(count_matches "$OUT" "^signatures: 4 signed \(4 verified with key\(s\) .*, 2 unsigned from before signing began$")" 2 \
    "signing-verify-rotated: the ledger and its export verify with both keys"
  expect_match "$OUT" "$KEY_ID" "signing-verify-rotated: the old key id is named"
  expect_match "$OUT" "$NEW_ID" "signing-verify-rotated: the new key id is named"
  expect_eq "$(grep -c '"signature":{"key_id":' "$RUN/signed-audit.jsonl")" 4 "the export carries the 4 signatures"
}

EXPECTED="signing-keygen.sh signing-verify.sh signing-rotate.sh signing-verify-rotated.sh"
if ! blocks=$(extract_blocks); then
  fail "OPERATIONS.md has malformed signing-test blocks"
  finish
  exit 1
fi
expect_eq "$(tr '\n' ' ' <<<"$blocks" | sed 's/ $//')" "$EXPECTED" "OPERATIONS.md has the signing blocks this test checks, in order"
for block in $blocks; do
  run_block "$block"
  name=${block%.*}
  "check_${name//-/_}"
done
finish
