// The PostgreSQL ledger the previous release wrote (schema 8, its
// numbering; SQLite's 10), restored from its pg_dump into a fresh database
// and opened by this release: migrated to the latest schema in one transaction,
// every row kept, verify passing before and after, the ledger at work
// afterwards; a ledger the migration cannot take refused by name, its dump
// unchanged. Registered only against the throwaway cluster.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import path from 'node:path';
import { test } from 'node:test';

import { FIXTURES, LATEST_POSTGRES, TABLES, expectEveryRowKept, expectLedgerWorks, expectVerifyPasses, migrate, recordedVerifyPassed,
         rowChanges } from './v10_lib.mjs';

const SERVER = process.env.EFFECTFENCE_TEST_LEDGER ?? '';

function psql(url, sql) {
  return execFileSync('psql', ['-X', '-q', '-At', '-v', 'ON_ERROR_STOP=1', url, '-c', sql],
                      { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
}

// A fresh database holding the fixture, dropped when the test ends.
function restoredFixture(t) {
  assert.match(SERVER, /^postgres(ql)?:\/\/[^/]*@\/[^?]*\?/, 'runs against the throwaway cluster only');
  const name = `v10_${randomBytes(6).toString('hex')}`;
  psql(SERVER, `CREATE DATABASE ${name}`);
  t.after(() => psql(SERVER, `DROP DATABASE ${name} WITH (FORCE)`));
  const url = SERVER.replace(/@\/[^?]*/, `@/${name}`);
  execFileSync('psql', ['-X', '-q', '-v', 'ON_ERROR_STOP=1', url, '-f', path.join(FIXTURES, 'ledger.pg.sql')]);
  return url;
}

const version = (url) => psql(url, 'SELECT max(version) FROM effectfence_schema').trim();
const triggers = (url) => psql(url, 'SELECT tgname FROM pg_trigger WHERE NOT tgisinternal ORDER BY 1').split('\n').filter(Boolean);
const stateOf = (url, intent) => psql(url, `SELECT state FROM intents WHERE intent = '${intent}'`).trim();

// The columns schema 8 has, by name: schema 13 keeps each counter in
// shards, the old rows in shard 0, and each must read as before.
const COLUMNS = { counters: 'name, value' };

function snapshot(url) {
  const rows = {};
  for (const table of TABLES) {
    rows[table] = psql(url, `COPY (SELECT ${COLUMNS[table] ?? '*'} FROM ${table} ORDER BY 1) TO STDOUT`)
      .split('\n').filter(Boolean);
  }
  return rows;
}

// The whole database as pg_dump writes it, less the lines that differ
// between two dumps of the same data (its version, a random key).
function dump(url) {
  return execFileSync('pg_dump', ['--no-owner', url], { encoding: 'utf8' })
    .split('\n').filter((l) => !/^-- Dumped (from|by)|^\\(un)?restrict /.test(l)).join('\n');
}

test('the previous release\'s PostgreSQL ledger (schema 8) migrates to the latest schema keeping every row, and verify passes before and after', async (t) => {
  const url = restoredFixture(t);
  assert.equal(version(url), '8');
  assert.ok(triggers(url).includes('intents_fenced_kept'));
  recordedVerifyPassed('verify-before.pg.txt');
  const checked = expectVerifyPasses(url, 'of the schema-8 ledger');
  const before = snapshot(url);
  const oldChargeHash = psql(url, "SELECT hash FROM certificates WHERE intent = 'charge:order-1001'").trim();

  const opened = migrate(url);
  assert.equal(opened.status, 0, opened.stderr);
  assert.match(opened.stderr, new RegExp(`\\(schema ${LATEST_POSTGRES}\\)`));
  assert.equal(version(url), LATEST_POSTGRES);
  assert.ok(triggers(url).includes('intents_follow_state_machine'));
  assert.ok(!triggers(url).includes('intents_fenced_kept'), '0009 replaces it');

  const after = snapshot(url);
  for (const table of TABLES) console.log(`${table}: ${before[table].length} rows before, ${after[table].length} after`);
  const reaped = expectEveryRowKept(rowChanges(before, after), /^result_ttl_ms\t315360000000$/);
  const verified = expectVerifyPasses(url, 'of the migrated ledger');
  assert.deepEqual(verified, { certificates: checked.certificates, events: checked.events + (reaped ? 1 : 0) });

  await expectLedgerWorks(t, url, oldChargeHash);
  expectVerifyPasses(url, 'after the migrated ledger was used');
});

// Negative control, as on SQLite: the edits schema 8 let through are
// refused once migrated; the first half shows them let through before.
test('after the PostgreSQL migration, the state moves schema 8 let a hand UPDATE make are refused', async (t) => {
  const old = restoredFixture(t);
  psql(old, "UPDATE intents SET state = 'unknown' WHERE intent = 'payout:batch-9'");
  psql(old, "UPDATE intents SET state = 'failed' WHERE intent = 'email:campaign-5'");
  assert.deepEqual([stateOf(old, 'payout:batch-9'), stateOf(old, 'email:campaign-5')], ['unknown', 'failed']);

  const url = restoredFixture(t);
  const opened = migrate(url);
  assert.equal(opened.status, 0, opened.stderr);
  assert.throws(() => psql(url, "UPDATE intents SET state = 'unknown' WHERE intent = 'payout:batch-9'"),
                (e) => /stays fenced until it is cleared.*no move from cleared to unknown/.test(e.stderr));
  assert.throws(() => psql(url, "UPDATE intents SET state = 'failed' WHERE intent = 'email:campaign-5'"),
                (e) => /an attempt in flight may be running its tool/.test(e.stderr));
  assert.deepEqual([stateOf(url, 'payout:batch-9'), stateOf(url, 'email:campaign-5')], ['cleared', 'unknown']);
});

// 0009 only drops and creates triggers and functions: no row a schema-8
// ledger holds can make it fail, only a schema edited by hand. The trigger
// it drops last is gone here, so its first statements (DROP
// intents_fenced_kept, CREATE FUNCTION, CREATE TRIGGER) have run when it
// fails: all of it must be undone.
test('a schema-8 PostgreSQL ledger the migration cannot take is refused by name and left as it was', async (t) => {
  const url = restoredFixture(t);
  psql(url, 'DROP TRIGGER intents_in_flight_fenced_with_event ON intents');
  const before = dump(url);

  const opened = migrate(url);
  assert.notEqual(opened.status, 0);
  assert.match(opened.stderr, /cannot open ledger: corrupt: .*is at schema version 8 \(effectfence_schema\), but lacks what migration 0009_state_moves.sql changes \(trigger "intents_in_flight_fenced_with_event" for table "intents" does not exist.*Nothing was changed/s);
  assert.equal(dump(url), before, 'the refused ledger was changed');
  assert.equal(version(url), '8');
  assert.ok(triggers(url).includes('intents_fenced_kept'));
  assert.equal(psql(url, "SELECT count(*) FROM pg_proc WHERE proname = 'effectfence_intents_follow_state_machine'").trim(), '0');
});
