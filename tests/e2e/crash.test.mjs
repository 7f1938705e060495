// A serve process killed with SIGKILL while it holds an admission: another
// process on the same ledger fences the intent as unknown.
import assert from 'node:assert/strict';
import { test } from 'node:test';

import { call, connect, eventually, freshLedger, isAlive, prepareArgs } from './helpers.mjs';

test('kill -9 of a serve holding an admission: another process sees the intent as unknown', async (t) => {
  const db = await freshLedger(t);
  const holder = await connect(t, db, 'holder');
  const watcher = await connect(t, db, 'watcher');

  const admitted = await call(holder, 'fence_prepare', prepareArgs('payout:7'));
  assert.equal(admitted.sc.status, 'fresh');
  const before = await call(watcher, 'fence_status', { intent: 'payout:7' });
  assert.equal(before.sc.intent.state, 'in_flight');

  process.kill(holder.pid, 'SIGKILL');
  await eventually(() => !isAlive(holder.pid), { what: `pid ${holder.pid} to be gone` });

  // The lease has most of a minute left: only noticing the dead holder can
  // fence the intent this soon.
  const fenced = await eventually(async () => {
    const { sc } = await call(watcher, 'fence_status', { intent: 'payout:7' });
    return sc.intent.state === 'unknown' ? sc.intent : null;
  }, { what: 'payout:7 to become unknown' });
  assert.ok(fenced.reason.length > 0);
  assert.ok(Date.now() < admitted.sc.prepared.lease_expires_at_ms);

  const retry = await call(watcher, 'fence_prepare', prepareArgs('payout:7'));
  assert.equal(retry.isError, true);
  assert.equal(retry.sc.reason, 'prior_failure');
});
