// The SQLite ledger the previous release wrote (schema 10), opened by this
// one: migrated to schema 11 in one transaction, every row kept, verify
// passing before and after, and the ledger at work afterwards. A ledger the
// migration cannot take is refused by name and left byte for byte as it was.
import assert from 'node:assert/strict';
import { copyFile } from 'node:fs/promises';
import path from 'node:path';
import { test } from 'node:test';

import { tempDir } from '../e2e/helpers.mjs';
import { FIXTURES, LATEST_SQLITE, TABLES, effectfence, expectEveryRowKept, expectLedgerWorks, expectVerifyPasses, migrate, recordedVerifyPassed,
         rowChanges, sha256, sqlite, sqliteRefused } from './v10_lib.mjs';

const FIXTURE = path.join(FIXTURES, 'ledger.sqlite');

async function copyOfFixture(t) {
  const ledger = path.join(await tempDir(t), 'ledger.sqlite');
  await copyFile(FIXTURE, ledger);
  return ledger;
}

function triggers(db) {
  return sqlite(db, "SELECT name FROM sqlite_master WHERE type = 'trigger' ORDER BY name").split('\n').filter(Boolean)
    .map((n) => n.replace(/^'|'$/g, ''));
}

// The columns schema 10 has, by name: schema 14 generates a certificate's
// from its body and adds intent_id to events, and each must read as before.
const COLUMNS = {
  certificates: 'hash, intent, domain, seq, generation, parent, agent, tool, body, committed_at',
  events: 'id, at, kind, intent, domain, seq, generation, actor, detail',
};

function snapshot(db) {
  const rows = {};
  for (const table of TABLES) {
    rows[table] = sqlite(db, `SELECT rowid, ${COLUMNS[table] ?? '*'} FROM ${table} ORDER BY rowid`)
      .split('\n').filter(Boolean);
  }
  return rows;
}

test('a schema-10 SQLite ledger of the previous release migrates to the latest schema keeping every row, and verify passes before and after', async (t) => {
  const ledger = await copyOfFixture(t);
  assert.equal(sqlite(ledger, 'PRAGMA user_version').trim(), '10');
  assert.ok(triggers(ledger).includes('intents_fenced_kept'));
  assert.ok(!triggers(ledger).includes('intents_follow_state_machine'));
  recordedVerifyPassed('verify-before.sqlite.txt');

  // The audit dump the old release exported from this ledger still checks out.
  const exported = effectfence(['verify', '--export', path.join(FIXTURES, 'export.jsonl')]);
  assert.equal(exported.status, 0, exported.stdout + exported.stderr);
  assert.match(exported.stdout, /every hash, body and parent link checks out/);

  // This verify reads a schema-10 ledger as it is, and changes nothing.
  const hash = sha256(ledger);
  const checked = expectVerifyPasses(ledger, 'of the schema-10 ledger');
  assert.equal(sha256(ledger), hash, 'verify changed the ledger');
  const before = snapshot(ledger);
  const oldChargeHash = sqlite(ledger, "SELECT hash FROM certificates WHERE intent = 'charge:order-1001'").trim().replace(/'/g, '');

  const opened = migrate(ledger);
  assert.equal(opened.status, 0, opened.stderr);
  assert.match(opened.stderr, new RegExp(`\\(schema ${LATEST_SQLITE}\\)`));
  assert.equal(sqlite(ledger, 'PRAGMA user_version').trim(), LATEST_SQLITE);
  assert.ok(triggers(ledger).includes('intents_follow_state_machine'));
  assert.ok(!triggers(ledger).includes('intents_fenced_kept'), '0011 replaces it');

  const after = snapshot(ledger);
  for (const table of TABLES) console.log(`${table}: ${before[table].length} rows before, ${after[table].length} after`);
  const reaped = expectEveryRowKept(rowChanges(before, after), /^\d+,'result_ttl_ms',315360000000$/);
  // Each event names its intent's row, or, for a name with none, its first event.
  assert.equal(sqlite(ledger, `SELECT count(*) FROM events e WHERE intent IS NOT NULL AND intent_id IS NOT
    coalesce((SELECT rowid FROM intents i WHERE i.intent = e.intent),
             -(SELECT min(id) FROM events f WHERE f.intent = e.intent))`).trim(), '0');
  const verified = expectVerifyPasses(ledger, 'of the migrated ledger');
  assert.deepEqual(verified, { certificates: checked.certificates, events: checked.events + (reaped ? 1 : 0) });

  await expectLedgerWorks(t, ledger, oldChargeHash);
  expectVerifyPasses(ledger, 'after the migrated ledger was used');
});

// Negative control: the hand edits schema 10 let through (a cleared intent
// set back to unknown; an unknown one set to failed with no event) are
// refused once migrated. Were the migration skipped, this test would fail
// (the edits would succeed), as the first half shows on the old ledger.
test('after the migration, the state moves schema 10 let a hand UPDATE make are refused', async (t) => {
  const old = await copyOfFixture(t);
  sqlite(old, "UPDATE intents SET state = 'unknown' WHERE intent = 'payout:batch-9'");
  sqlite(old, "UPDATE intents SET state = 'failed' WHERE intent = 'email:campaign-5'");
  assert.equal(sqlite(old, "SELECT state FROM intents WHERE intent IN ('payout:batch-9', 'email:campaign-5') ORDER BY intent").trim(),
               "'failed'\n'unknown'", 'schema 10 let both through');

  const ledger = await copyOfFixture(t);
  const opened = migrate(ledger);
  assert.equal(opened.status, 0, opened.stderr);
  assert.match(sqliteRefused(ledger, "UPDATE intents SET state = 'unknown' WHERE intent = 'payout:batch-9'"),
               /effectfence: a failed or unknown intent stays fenced until it is cleared.*state machine has no such move/);
  assert.match(sqliteRefused(ledger, "UPDATE intents SET state = 'failed' WHERE intent = 'email:campaign-5'"),
               /effectfence: an attempt in flight may be running its tool/);
  assert.equal(sqlite(ledger, "SELECT state FROM intents WHERE intent IN ('payout:batch-9', 'email:campaign-5') ORDER BY intent").trim(),
               "'unknown'\n'cleared'");
  expectVerifyPasses(ledger, 'after the refused edits');
});

// 0011 only creates and drops triggers: CREATE TRIGGER reads no rows, so
// no content a schema-10 ledger can hold makes it fail. Only a schema
// edited by hand can: a trigger it drops that is gone, or a name it creates
// that is taken (a version set back by hand: sqlite_ledger_test covers it).
// Here the trigger 0011 drops third is gone, so its first two statements
// (CREATE intents_follow_state_machine, DROP intents_fenced_kept) have run
// when it fails: all of it must be undone.
test('a schema-10 SQLite ledger the migration cannot take is refused by name and left byte for byte as it was', async (t) => {
  const ledger = await copyOfFixture(t);
  sqlite(ledger, 'DROP TRIGGER intents_in_flight_fenced_with_event');
  const hash = sha256(ledger);
  const names = triggers(ledger);

  const opened = migrate(ledger);
  assert.notEqual(opened.status, 0);
  assert.match(opened.stderr, /cannot open ledger: corrupt: .*is at schema version 10 \(PRAGMA user_version\), but lacks what the migration to version 11 changes \(no such trigger: intents_in_flight_fenced_with_event\).*Nothing was changed/);
  assert.equal(sha256(ledger), hash, 'the refused ledger was changed');
  assert.equal(sqlite(ledger, 'PRAGMA user_version').trim(), '10');
  assert.deepEqual(triggers(ledger), names);
  assert.ok(names.includes('intents_fenced_kept') && !names.includes('intents_follow_state_machine'));
});

// The checkers above, given what they must catch: a row lost, changed or
// added, and a ledger verify does not pass.
test('the row and verify checks fail on a row lost, changed or added, and on a ledger with a dropped trigger', async (t) => {
  const ledger = await copyOfFixture(t);
  const before = snapshot(ledger);
  const ttl = /^\d+,'result_ttl_ms',\d+$/;
  assert.doesNotThrow(() => expectEveryRowKept(rowChanges(before, before), ttl));
  const variants = {
    'a clear lost': { ...before, clears: before.clears.slice(1) },
    'an event changed': { ...before, events: [before.events[0].replace('admitted', 'takeover'), ...before.events.slice(1)] },
    'an intent added': { ...before, intents: [...before.intents, "999,'ghost'"] },
    'a certificate lost': { ...before, certificates: before.certificates.slice(0, -1) },
  };
  for (const [what, after] of Object.entries(variants)) {
    assert.throws(() => expectEveryRowKept(rowChanges(before, after), ttl), assert.AssertionError, what);
  }
  sqlite(ledger, 'DROP TRIGGER intents_fenced_kept');
  assert.throws(() => expectVerifyPasses(ledger, 'with a trigger dropped'), /protection_missing/);
});
