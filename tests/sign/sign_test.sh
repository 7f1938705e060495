#!/usr/bin/env bash
# Signed certificates end to end: keys from `effectfence keygen`, real wrap
# processes committing real calls of demo-server into real ledgers, the
# attack done by hand with the stock sqlite3 shell (or psql), and what
# `effectfence verify --public-key` says about each.
#   sign_test.sh EFFECTFENCE SQLITE3 [POSTGRES_URL PSQL]
# With POSTGRES_URL the same checks run on a PostgreSQL ledger (each run in
# a schema of its own) instead of SQLite files.
set -uo pipefail
EF=$(realpath "$1")
SQLITE3=$2
PG_URL=${3:-}
PSQL=${4:-psql}
FIXTURE=unused
# shellcheck source=../operations/lib.sh
source "$(dirname "$0")/../operations/lib.sh"
export EFFECTFENCE_RESULT_TTL_SECS=315360000  # nothing is swept while the test reads it

KEY=$WORK/fence.key
OTHER=$WORK/other.key

# --- ledgers: an SQLite file, or a schema of its own on PostgreSQL -------------
SCHEMAS=()
new_ledger() {  # new_ledger NAME: prints the --db value of a fresh ledger
  if [[ -z "$PG_URL" ]]; then
    echo "$WORK/$1.sqlite"
  else
    local schema="sign_$1_$$"
    "$PSQL" -qX "$PG_URL" -c "DROP SCHEMA IF EXISTS $schema CASCADE; CREATE SCHEMA $schema" >/dev/null 2>&1
    SCHEMAS+=("$schema")
    # libpq options: every connection of this ledger works in its schema.
    local sep='?'
    [[ "$PG_URL" == *\?* ]] && sep='&'
    echo "${PG_URL}${sep}options=-csearch_path%3D$schema"
  fi
}
drop_schemas() {
  local s
  for s in "${SCHEMAS[@]}"; do "$PSQL" -qX "$PG_URL" -c "DROP SCHEMA IF EXISTS $s CASCADE" >/dev/null 2>&1; done
}
[[ -n "$PG_URL" ]] && trap 'drop_schemas; cleanup' EXIT

sql() {  # sql LEDGER SQL: one statement through the stock shell
  if [[ -z "$PG_URL" ]]; then
    "$SQLITE3" -batch -noheader "$1" ".timeout 5000" "$2"
  else
    "$PSQL" -qXAt "$1" -c "$2"
  fi
}

# --- commits through real processes -------------------------------------------
mcp_calls() {  # mcp_calls ORDER...: an MCP session calling charge once per order
  printf '%s\n' '{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"sign-test","version":"1"}}}' \
    '{"jsonrpc":"2.0","method":"notifications/initialized"}'
  local o
  for o in "$@"; do
    printf '{"jsonrpc":"2.0","id":"%s","method":"tools/call","params":{"name":"charge","arguments":{"order":"%s","amount_cents":4900}}}\n' "$o" "$o"
  done
}
# commit LEDGER KEYFILE|- ORDER...: one wrap process (signing with KEYFILE, or
# not for -) in front of demo-server, one charge per order. Its stderr is
# kept in $WORK/wrap.err.
commit() {
  local ledger=$1 key=$2
  shift 2
  local sign=()
  [[ "$key" != - ]] && sign=(--signing-key "$key")
  mcp_calls "$@" | "$EF" wrap --db "$ledger" "${sign[@]}" -- "$EF" demo-server --charges "$WORK/charges.sqlite" \
    >"$WORK/wrap.out" 2>"$WORK/wrap.err"
  local status=$?
  [[ $status -eq 0 ]] || fail "wrap exited $status: $(cat "$WORK/wrap.err")"
}

verify() {  # verify ARGS...: sets OUT (stdout) and RC
  OUT=$("$EF" verify "$@" 2>&1)
  RC=$?
}
expect_rc() {  # expect_rc WANT WHAT: verify's exit status, with its report when it differs
  expect_eq "$RC" "$1" "$2"
  [[ "$RC" == "$1" ]] || echo "$OUT" >&2
}
vjson() {  # vjson LEDGER ARGS... | jq: verify --json
  local ledger=$1
  shift
  "$EF" verify --db "$ledger" --json "$@" 2>/dev/null
}

# --- the attack -----------------------------------------------------------------
# rewrite_and_rehash LEDGER HASH [keep|delete]: what someone who can write
# the ledger does to change a recorded result so that a hash-chain check
# still passes. Every trigger is saved and dropped; the certificate's body
# is edited (its charge ids rewritten); then every certificate whose hash
# no longer matches its body gets its SHA-256 recomputed, and every place
# that names the old hash (children's bodies and parent columns, the
# intent, the domain head, the committed event) is rewritten to the new
# one, until all agree; the triggers are put back exactly as they were.
# Signature rows of the old hashes are left (keep) or deleted (delete).
rewrite_and_rehash() {
  local ledger=$1 target=$2 signatures=${3:-keep}
  if [[ -n "$PG_URL" ]]; then
    rewrite_and_rehash_pg "$@"
    return
  fi
  sql "$ledger" "SELECT sql || ';' FROM sqlite_master WHERE type = 'trigger'" >"$WORK/triggers.sql"
  local name
  for name in $(sql "$ledger" "SELECT name FROM sqlite_master WHERE type = 'trigger'"); do
    sql "$ledger" "DROP TRIGGER $name"
  done
  sql "$ledger" "UPDATE certificates SET body = replace(body, '\"ch_', '\"xx_') WHERE hash = '$target'"
  local changed=1 rowid body old new
  while ((changed)); do
    changed=0
    for rowid in $(sql "$ledger" "SELECT rowid FROM certificates ORDER BY rowid"); do
      body=$(sql "$ledger" "SELECT body FROM certificates WHERE rowid = $rowid")
      old=$(sql "$ledger" "SELECT hash FROM certificates WHERE rowid = $rowid")
      new=$(printf '%s' "$body" | sha256sum | cut -c1-64)
      [[ "$old" == "$new" ]] && continue
      changed=1
      [[ "$signatures" == delete ]] && sql "$ledger" "DELETE FROM signatures WHERE certificate = '$old'"
      sql "$ledger" "UPDATE certificates SET hash = '$new' WHERE rowid = $rowid;
        UPDATE certificates SET body = replace(body, '$old', '$new') WHERE instr(body, '$old') > 0;
        UPDATE intents SET cert_hash = '$new' WHERE cert_hash = '$old';
        UPDATE intents SET parent = '$new' WHERE parent = '$old';
        UPDATE domains SET head = '$new' WHERE head = '$old';
        UPDATE events SET detail = replace(detail, '$old', '$new') WHERE instr(detail, '$old') > 0;"
    done
  done
  "$SQLITE3" -batch "$ledger" <"$WORK/triggers.sql"
}

# The same on PostgreSQL, where the database computes SHA-256 itself.
rewrite_and_rehash_pg() {
  local ledger=$1 target=$2 signatures=${3:-keep}
  # PostgreSQL enforces the signatures' foreign key: an attacker who leaves
  # the old signatures behind drops it first.
  [[ "$signatures" == keep ]] && sql "$ledger" "ALTER TABLE signatures DROP CONSTRAINT signatures_certificate_fkey"
  sql "$ledger" "
    ALTER TABLE certificates DISABLE TRIGGER USER; ALTER TABLE intents DISABLE TRIGGER USER;
    ALTER TABLE domains DISABLE TRIGGER USER; ALTER TABLE events DISABLE TRIGGER USER;
    ALTER TABLE signatures DISABLE TRIGGER USER;
    UPDATE certificates SET body = replace(body, '\"ch_', '\"xx_') WHERE hash = '$target';
    DO \$\$
    DECLARE r record; fresh text;
    BEGIN
      LOOP
        SELECT hash, encode(sha256(convert_to(body, 'UTF8')), 'hex') AS h INTO r FROM certificates
         WHERE hash <> encode(sha256(convert_to(body, 'UTF8')), 'hex') LIMIT 1;
        EXIT WHEN NOT FOUND;
        fresh := r.h;
        IF '$signatures' = 'delete' THEN DELETE FROM signatures WHERE certificate = r.hash; END IF;
        UPDATE certificates SET hash = fresh WHERE hash = r.hash;
        UPDATE certificates SET parent = fresh WHERE parent = r.hash;
        UPDATE certificates SET body = replace(body, r.hash, fresh) WHERE strpos(body, r.hash) > 0;
        UPDATE intents SET cert_hash = fresh WHERE cert_hash = r.hash;
        UPDATE intents SET parent = fresh WHERE parent = r.hash;
        UPDATE domains SET head = fresh WHERE head = r.hash;
        UPDATE events SET detail = replace(detail, r.hash, fresh) WHERE strpos(detail, r.hash) > 0;
      END LOOP;
    END \$\$;
    ALTER TABLE certificates ENABLE TRIGGER USER; ALTER TABLE intents ENABLE TRIGGER USER;
    ALTER TABLE domains ENABLE TRIGGER USER; ALTER TABLE events ENABLE TRIGGER USER;
    ALTER TABLE signatures ENABLE TRIGGER USER;" >/dev/null
}

first_cert() { sql "$1" "SELECT hash FROM certificates ORDER BY committed_at, hash LIMIT 1"; }
nth_cert() { sql "$1" "SELECT hash FROM certificates ORDER BY committed_at, hash LIMIT 1 OFFSET $2"; }

# === keygen ======================================================================
"$EF" keygen --out "$KEY" >"$WORK/keygen.out" 2>&1
expect_eq "$?" 0 "keygen writes a key pair"
expect_eq "$(stat -c %a "$KEY")" 600 "the private key file is mode 0600"
expect_match "$(head -1 "$KEY")" '^-----BEGIN PRIVATE KEY-----$' "the private key is PKCS#8 PEM"
expect_match "$(head -1 "$KEY.pub")" '^-----BEGIN PUBLIC KEY-----$' "the public key is written beside it"
KEY_ID=$(sed -n 's/^key id \([0-9a-f]\{16\}\)$/\1/p' "$WORK/keygen.out")
# The key id is SHA-256 over the 32 raw public-key bytes (the tail of the DER).
RAW_ID=$(sed '1d;$d' "$KEY.pub" | base64 -d | tail -c 32 | sha256sum | cut -c1-16)
expect_eq "$KEY_ID" "$RAW_ID" "keygen prints the key id: SHA-256 of the raw public key, 16 hex digits"
CHECKS=$((CHECKS + 1))
if [[ "$(cat "$WORK/keygen.out")" == *"$(sed -n 2p "$KEY.pub")"* ]]; then pass "keygen prints the public key"; else fail "keygen prints the public key"; fi
before=$(sha256sum "$KEY" "$KEY.pub")
"$EF" keygen --out "$KEY" >/dev/null 2>"$WORK/err"
expect_eq "$?" 2 "keygen refuses to overwrite an existing key"
expect_eq "$(sha256sum "$KEY" "$KEY.pub")" "$before" "and the key pair is untouched"
expect_match "$(cat "$WORK/err")" "already exists; refusing to overwrite" "the refusal says why"
"$EF" keygen --out "$OTHER" >/dev/null 2>&1
expect_eq "$?" 0 "a second, unrelated key pair"

# === a signed ledger ============================================================
L=$(new_ledger signed)
commit "$L" "$KEY" a b c
expect_match "$(cat "$WORK/wrap.err")" "certificates signed with key $KEY_ID" "wrap logs the key id it signs with"
expect_eq "$(sql "$L" "SELECT count(*) FROM signatures WHERE key_id = '$KEY_ID'")" 3 "every certificate issued got a signature row"
verify --db "$L" --public-key "$KEY.pub"
expect_rc 0 "verify --public-key passes the signed ledger"
expect_match "$OUT" "signatures: 3 signed \(3 verified with key\(s\) $KEY_ID, 0 bad" "verify counts 3 verified signatures"
verify --db "$L" --public-key "$OTHER.pub"
expect_rc 1 "the wrong public key fails verify"
expect_eq "$(count_matches "$OUT" ': unknown_key: ')" 3 "each certificate is reported as signed by a key not given"
verify --db "$L" --public-key "$OTHER.pub" --public-key "$KEY.pub"
expect_rc 0 "old and new public keys together (rotation) pass"

# The key's bytes are nowhere: not in the ledger, not in what wrap logged.
SEED_HEX=$(sed '1d;$d' "$KEY" | base64 -d | tail -c 32 | od -An -tx1 -v | tr -d ' \n')
PEM_LINE=$(sed -n 2p "$KEY")
leaks=0
files=("$WORK/wrap.err" "$WORK/wrap.out")
[[ -z "$PG_URL" ]] && files+=("$L" "$L-wal")
[[ -n "$PG_URL" ]] && sql "$L" "SELECT string_agg(t::text, ' ') FROM (SELECT * FROM signatures) t" >"$WORK/pg-rows" &&
  sql "$L" "SELECT string_agg(c::text, ' ') FROM certificates c" >>"$WORK/pg-rows" && files+=("$WORK/pg-rows")
for f in "${files[@]}"; do
  [[ -f "$f" ]] || continue
  grep -qF -- "$PEM_LINE" "$f" && leaks=$((leaks + 1))
  grep -qF -- "$SEED_HEX" "$f" && leaks=$((leaks + 1))
  od -An -tx1 -v "$f" | tr -d ' \n' | grep -qF -- "$SEED_HEX" && leaks=$((leaks + 1))
done
expect_eq "$leaks" 0 "the private key's bytes (PEM, raw, hex) appear in no ledger file, row or log"

# A signature moved to another certificate.
M=$(new_ledger moved)
commit "$M" "$KEY" d e
c1=$(first_cert "$M")
c2=$(nth_cert "$M" 1)
if [[ -z "$PG_URL" ]]; then
  sql "$M" "DROP TRIGGER signatures_immutable_update;
    UPDATE signatures SET signature = (SELECT signature FROM signatures WHERE certificate = '$c2') WHERE certificate = '$c1';"
  sql "$M" "$(q "$L" "SELECT sql FROM sqlite_master WHERE name = 'signatures_immutable_update'");"
else
  sql "$M" "ALTER TABLE signatures DISABLE TRIGGER USER;
    UPDATE signatures SET signature = (SELECT signature FROM signatures WHERE certificate = '$c2') WHERE certificate = '$c1';
    ALTER TABLE signatures ENABLE TRIGGER USER;"
fi
verify --db "$M" --public-key "$KEY.pub"
expect_rc 1 "a signature moved to another certificate fails verify"
expect_match "$OUT" "$c1: bad_signature: intent '" "the certificate is named, with its intent, as badly signed"

# === the attack, with its negative control =====================================
# Against an unsigned ledger the attack goes unseen: that is what it is.
U=$(new_ledger unsigned)
commit "$U" - f g h
target=$(first_cert "$U")
rewrite_and_rehash "$U" "$target"
expect_eq "$(sql "$U" "SELECT count(*) FROM certificates WHERE hash = '$target'")" 0 "control: the rewritten certificate has a new hash"
expect_match "$(sql "$U" "SELECT group_concat(body, ' ') FROM certificates" 2>/dev/null || sql "$U" "SELECT string_agg(body, ' ') FROM certificates")" '"xx_' \
  "control: a recorded result now says what the attacker wrote"
verify --db "$U"
expect_rc 0 "control: the rewritten, rehashed unsigned ledger passes verify (the hash chain cannot see it)"

# The same attack on the signed ledger, its signature rows left behind.
A=$(new_ledger attacked)
commit "$A" "$KEY" i j k
rewrite_and_rehash "$A" "$(first_cert "$A")" keep
verify --db "$A"
expect_rc 1 "rewritten and rehashed, signatures left: verify fails even without a key"
verify --db "$A" --public-key "$KEY.pub"
expect_rc 1 "rewritten and rehashed, signatures left: verify --public-key fails"
expect_match "$OUT" ': orphan_signature: ' "the stale signature of the old hash is reported"
expect_match "$OUT" ': unsigned_after_signing: intent |unsigned_beyond_history: ' "the rehashed certificate is reported unsigned (by intent), or as unsigned history beyond the count"

# Its signature rows deleted too, the middle certificate rewritten.
B=$(new_ledger attacked_deleted)
commit "$B" "$KEY" l m n
rewrite_and_rehash "$B" "$(nth_cert "$B" 1)" delete
verify --db "$B" --public-key "$KEY.pub"
expect_rc 1 "rewritten, rehashed and its signature deleted: verify --public-key fails"
expect_match "$OUT" ': unsigned_after_signing: intent ' "the certificate is unsigned after signing began"

# Unsigned history, then the first signed certificate rewritten, its
# signature deleted and its commit time moved before the history's: every
# ordering witness now says "history"; the count every signature carries
# (how many unsigned certificates there were when signing began) does not.
P=$(new_ledger prefix)
commit "$P" - w1
commit "$P" "$KEY" w2 w3
# The first by its place in the domain: two commits in one millisecond share signed_at.
first_signed=$(sql "$P" "SELECT s.certificate FROM signatures s JOIN certificates c ON c.hash = s.certificate ORDER BY c.seq LIMIT 1")
rewrite_and_rehash "$P" "$first_signed" delete
sql "$P" "$( [[ -z "$PG_URL" ]] && echo "DROP TRIGGER certificates_immutable_update;" ||
  echo "ALTER TABLE certificates DISABLE TRIGGER USER;")
  UPDATE certificates SET committed_at = 1 WHERE hash NOT IN (SELECT certificate FROM signatures);
  $( [[ -n "$PG_URL" ]] && echo "ALTER TABLE certificates ENABLE TRIGGER USER;")"
[[ -z "$PG_URL" ]] && sql "$P" "$(q "$L" "SELECT sql FROM sqlite_master WHERE name = 'certificates_immutable_update'");"
verify --db "$P" --public-key "$KEY.pub"
expect_rc 1 "the first signed certificate rewritten and backdated: verify --public-key fails"
expect_match "$OUT" 'unsigned_beyond_history: 2 certificate\(s\) pass as unsigned history, but the signatures say the ledger held 1' \
  "it counts one unsigned certificate more than when signing began"
"$EF" export --db "$P" --out "$WORK/prefix.jsonl" 2>/dev/null
verify --export "$WORK/prefix.jsonl" --public-key "$KEY.pub"
expect_rc 1 "and so does verify --export of it, offline"

# The first certificate rewritten and every signature stripped.
S=$(new_ledger stripped)
commit "$S" "$KEY" o p
rewrite_and_rehash "$S" "$(first_cert "$S")" delete
sql "$S" "$( [[ -z "$PG_URL" ]] && echo "DROP TRIGGER signatures_immutable_delete; DELETE FROM signatures;" ||
  echo "ALTER TABLE signatures DISABLE TRIGGER USER; DELETE FROM signatures; ALTER TABLE signatures ENABLE TRIGGER USER;")"
[[ -z "$PG_URL" ]] && sql "$S" "$(q "$L" "SELECT sql FROM sqlite_master WHERE name = 'signatures_immutable_delete'");"
verify --db "$S" --public-key "$KEY.pub"
expect_rc 1 "every signature stripped: verify --public-key fails"
expect_match "$OUT" 'no_signatures: public keys were given, but none of the 2 certificate' "it says none is signed"

# === unsigned history, then signing begins =====================================
H=$(new_ledger mixed)
commit "$H" - q r
commit "$H" "$KEY" s t u
verify --db "$H" --public-key "$KEY.pub"
expect_rc 0 "unsigned history followed by signed certificates passes"
expect_match "$OUT" "signatures: 3 signed \(3 verified .*, 2 unsigned from before signing began" "the counts: 3 signed, 2 unsigned history"
expect_eq "$(vjson "$H" --public-key "$KEY.pub" | jq -c '.signatures | [.verified, .unsigned_history, .unsigned_after_signing, .bad]')" \
  "[3,2,0,0]" "verify --json gives the same counts"
verify --db "$H" --public-key "$KEY.pub" --require-signed
expect_rc 1 "--require-signed fails the unsigned history"
expect_eq "$(count_matches "$OUT" ': unsigned: intent ')" 2 "both unsigned certificates are named"
# A process without the key committing after signing began.
commit "$H" - v
verify --db "$H" --public-key "$KEY.pub"
expect_rc 1 "an unsigned commit after signing began fails verify"
expect_match "$OUT" "unsigned where a signature was due" "and is counted apart from the history"

# The export carries the signatures: checked offline.
"$EF" export --db "$A" --out "$WORK/attacked.jsonl" 2>/dev/null
"$EF" export --db "$L" --out "$WORK/signed.jsonl" 2>/dev/null
expect_eq "$(grep -c '"signature":{"key_id":"'"$KEY_ID"'"' "$WORK/signed.jsonl")" 3 "export writes each certificate's signature"
verify --export "$WORK/signed.jsonl" --public-key "$KEY.pub"
expect_rc 0 "verify --export --public-key passes the signed export"
verify --export "$WORK/signed.jsonl" --public-key "$OTHER.pub"
expect_rc 1 "verify --export with the wrong public key fails"
verify --export "$WORK/attacked.jsonl" --public-key "$KEY.pub"
expect_rc 1 "the export of the attacked ledger fails verify --export --public-key"
sed 's/"signature":"\([0-9a-f]\)/"signature":"0\1/; s/"signature":"0\([0-9a-f]\{127\}\)[0-9a-f]"/"signature":"0\1"/' \
  "$WORK/signed.jsonl" >"$WORK/edited.jsonl"
verify --export "$WORK/edited.jsonl" --public-key "$KEY.pub"
expect_rc 1 "an export whose signature was edited fails"
expect_match "$OUT" 'bad_signature' "as a bad signature"

# === keys refused at startup ===================================================
cp "$KEY" "$WORK/open.key"
chmod 644 "$WORK/open.key"
R=$(new_ledger refused)
mcp_calls w | "$EF" wrap --db "$R" --signing-key "$WORK/open.key" -- "$EF" demo-server >/dev/null 2>"$WORK/err"
expect_eq "$?" 2 "wrap refuses a key file with mode 0644"
expect_match "$(cat "$WORK/err")" "has mode 0644: it must be readable by its owner only. Run chmod 600" "the error names the mode and the fix"
"$EF" serve --db "$R" --signing-key "$WORK/open.key" </dev/null >/dev/null 2>"$WORK/err2"
expect_eq "$?" 2 "serve refuses it too"
EFFECTFENCE_SIGNING_KEY=$WORK/open.key "$EF" serve --db "$R" </dev/null >/dev/null 2>"$WORK/err3"
expect_eq "$?" 2 "and so does EFFECTFENCE_SIGNING_KEY"
"$EF" serve --db "$R" --shared --signing-key "$WORK/open.key" </dev/null >/dev/null 2>"$WORK/err4"
expect_eq "$?" 2 "and serve --shared"
cp "$KEY.pub" "$WORK/pub-as.key"
chmod 600 "$WORK/pub-as.key"
"$EF" serve --db "$R" --signing-key "$WORK/pub-as.key" </dev/null >/dev/null 2>"$WORK/err5"
expect_eq "$?" 2 "a public key given as the signing key is refused"
expect_match "$(cat "$WORK/err5")" "is refused: it is not an unencrypted PKCS#8 PEM private key" "as not a private key"
expect_match "$(cat "$WORK/err5")" "PEM private key \(effectfence keygen writes an Ed25519 key pair\)" \
  "and the command adds how to make one"
openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$WORK/ec.key" 2>/dev/null && chmod 600 "$WORK/ec.key" &&
  { "$EF" serve --db "$R" --signing-key "$WORK/ec.key" </dev/null >/dev/null 2>"$WORK/err6"
    expect_eq "$?" 2 "an ECDSA key is refused"
    expect_match "$(cat "$WORK/err6")" "not Ed25519" "as not an Ed25519 key"; }
"$EF" serve --db "$R" --signing-key "$WORK/missing.key" </dev/null >/dev/null 2>"$WORK/err7"
expect_eq "$?" 2 "a missing key file is refused"
expect_match "$(cat "$WORK/err7")" "cannot read the signing key .*missing.key: No such file" "naming the file"
leaks=0
for f in "$WORK"/err*; do grep -qF -- "$PEM_LINE" "$f" && leaks=$((leaks + 1)); done
expect_eq "$leaks" 0 "no refusal prints the key's bytes"
expect_eq "$(sql "$R" "SELECT count(*) FROM certificates" 2>/dev/null || echo 0)" 0 "nothing was committed with a refused key"

finish
