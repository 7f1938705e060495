// What the schema-10 migration tests share: the ledgers the previous
// release wrote (tests/fixtures/ledgers/v10), read and edited with the
// stock sqlite3 and psql shells, and the checks run on both kinds.
import assert from 'node:assert/strict';
import { execFileSync, spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

import { BIN, call, connect } from '../e2e/helpers.mjs';

export { BIN };
export const FIXTURES = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../fixtures/ledgers/v10');

// The schema version this release migrates to: its newest migration file
// (migrations/NNNN_*.sql, migrations/postgres/NNNN_*.sql), so a later
// migration does not break what these tests check of the step from v10.
function newestMigration(dir) {
  const numbers = readdirSync(dir).filter((f) => /^\d{4}_.*\.sql$/.test(f)).map((f) => Number(f.slice(0, 4)));
  return String(Math.max(...numbers));
}
const MIGRATIONS = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../migrations');
export const LATEST_SQLITE = newestMigration(MIGRATIONS);
export const LATEST_POSTGRES = newestMigration(path.join(MIGRATIONS, 'postgres'));

// The tables a ledger's rows live in (schema/schema.sql).
export const TABLES = ['intents', 'domains', 'certificates', 'events', 'counters', 'retention', 'clears'];

// The fixture's finished intents are older than a day once it has aged:
// the servers started here keep results ten years, so that the sweep a
// server runs when it starts forgets none of them.
export const TEN_YEARS_SECS = '315360000';

export function sha256(file) {
  return createHash('sha256').update(readFileSync(file)).digest('hex');
}

// Runs effectfence with no input; returns {status, stdout, stderr}.
export function effectfence(args, env = {}) {
  const r = spawnSync(BIN, args, { input: '', encoding: 'utf8', env: { ...process.env, ...env }, timeout: 60000 });
  return { status: r.status, stdout: r.stdout, stderr: r.stderr };
}

// The documented way to migrate a ledger: open it once with serve.
export function migrate(ledger) {
  return effectfence(['serve', '--db', ledger], { EFFECTFENCE_RESULT_TTL_SECS: TEN_YEARS_SECS });
}

// `effectfence verify` must pass and find no impossible history; returns
// the number of certificates and events it checked.
export function expectVerifyPasses(ledger, when) {
  const r = effectfence(['verify', '--db', ledger, '--json']);
  assert.equal(r.status, 0, `verify ${when}: ${r.stdout}${r.stderr}`);
  assert.doesNotMatch(r.stdout, /impossible_history/, `verify ${when}`);
  const report = JSON.parse(r.stdout);
  assert.equal(report.ok, true, `verify ${when}: ${r.stdout}`);
  return { certificates: report.certificates, events: report.events };
}

// The old release's verify output, recorded when the fixture was written.
export function recordedVerifyPassed(name) {
  const text = readFileSync(path.join(FIXTURES, name), 'utf8');
  assert.match(text, /: \d+ certificate\(s\), \d+ event\(s\): every hash, body and parent link checks out\n$/);
}

// Rows present before and missing after (lost or changed), and rows present
// after only (added or changed), per table; each row one line of text.
export function rowChanges(before, after) {
  const changes = {};
  for (const table of TABLES) {
    const b = new Set(before[table]);
    const a = new Set(after[table]);
    assert.equal(b.size, before[table].length, `${table}: duplicate rows in the snapshot`);
    changes[table] = { lost: [...b].filter((r) => !a.has(r)), added: [...a].filter((r) => !b.has(r)) };
  }
  return changes;
}

// Every row kept. What opening may add: a server that starts fences an
// attempt whose holder process is gone (charge:order-1005, when the holder
// ran on this host: the generating machine), with its holder_dead event,
// and records its result TTL (raised to ten years). Nothing else.
export function expectEveryRowKept(changes, ttlRow) {
  const reaped = changes.events.added.length === 1;
  for (const table of ['domains', 'certificates', 'counters', 'clears']) {
    assert.deepEqual(changes[table], { lost: [], added: [] }, `${table} changed by the migration`);
  }
  assert.deepEqual(changes.events.lost, [], 'events lost by the migration');
  if (reaped) {
    assert.match(changes.events.added[0], /holder_dead.*charge:order-1005/);
    assert.equal(changes.intents.lost.length, 1);
    assert.match(changes.intents.lost[0], /charge:order-1005.*in_flight/);
    assert.equal(changes.intents.added.length, 1);
    assert.match(changes.intents.added[0], /charge:order-1005.*unknown/);
  } else {
    assert.deepEqual(changes.events.added, [], 'events added by the migration');
    assert.deepEqual(changes.intents, { lost: [], added: [] }, 'intents changed by the migration');
  }
  assert.equal(changes.retention.lost.length, changes.retention.added.length);
  for (const row of changes.retention.added) assert.match(row, ttlRow);
  return reaped;
}

// The migrated ledger at work, through a real serve and the MCP SDK client:
// an old result replays, fenced intents stay fenced until an operator
// clears them, a cleared one runs again, a new action runs once.
export async function expectLedgerWorks(t, ledger, oldChargeHash) {
  const s = await connect(t, ledger, 'after-migration');
  const charge = { intent: 'charge:order-1001', domain: 'order:1001', tool: 'charge',
                   args: { order: '1001', amount_cents: 4900, currency: 'EUR' }, agent: 'billing-agent' };
  const replay = await call(s, 'fence_prepare', charge);
  assert.equal(replay.sc.status, 'already_done', JSON.stringify(replay.sc));
  assert.equal(replay.sc.cert.hash, oldChargeHash);
  assert.deepEqual(replay.sc.cert.result, { charge: 'ch_1001' });

  const payout8 = { intent: 'payout:batch-8', domain: 'payouts', tool: 'payout', args: { batch: 8 }, agent: 'treasury-agent' };
  const migrate3 = { intent: 'migrate:staging-3', domain: 'db:staging', tool: 'migrate', args: { to: 3 }, agent: 'sre-c' };
  for (const fenced of [payout8, migrate3]) {
    const r = await call(s, 'fence_prepare', fenced);
    assert.equal(r.isError, true);
    assert.equal(r.sc.reason, 'prior_failure', `${fenced.intent} stays fenced: ${JSON.stringify(r.sc)}`);
  }

  // Cleared by the old release's operator (effectfence clear): runs again.
  const payout9 = { intent: 'payout:batch-9', domain: 'payouts', tool: 'payout', args: { batch: 9 }, agent: 'treasury-agent' };
  const again = await call(s, 'fence_prepare', payout9);
  assert.equal(again.sc.status, 'fresh', JSON.stringify(again.sc));
  assert.equal((await call(s, 'fence_commit', { prepared: again.sc.prepared, result: { payout: 'po_9' } })).sc.status, 'committed');

  const fresh = { intent: 'charge:order-3001', domain: 'order:3001', tool: 'charge',
                  args: { order: '3001', amount_cents: 100 }, agent: 'billing-agent' };
  const p = await call(s, 'fence_prepare', fresh);
  assert.equal(p.sc.status, 'fresh');
  assert.equal((await call(s, 'fence_commit', { prepared: p.sc.prepared, result: { charge: 'ch_3001' } })).sc.status, 'committed');
  assert.equal((await call(s, 'fence_prepare', fresh)).sc.status, 'already_done');
  await s.close();

  // An operator clears payout:batch-8 with the new CLI: left cleared, for
  // the hand-edit check.
  const cleared = effectfence(['clear', '--db', ledger, 'payout:batch-8', '--operator', 'carol', '--reason', 'provider shows none']);
  assert.equal(cleared.status, 0, cleared.stderr);
}

// sqlite3 -quote: one line per row, every value an SQL literal.
export function sqlite(db, sql) {
  return execFileSync('sqlite3', ['-batch', '-noheader', '-quote', db, '.timeout 5000', sql],
                      { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
}
// The same statement, expected to be refused: returns the shell's message.
export function sqliteRefused(db, sql) {
  const r = spawnSync('sqlite3', ['-batch', db, '.timeout 5000', sql], { encoding: 'utf8' });
  assert.notEqual(r.status, 0, `expected a refusal of: ${sql}`);
  return r.stderr;
}
