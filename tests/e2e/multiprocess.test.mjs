// Several `effectfence serve` processes on one ledger file, each with its own
// SDK client, as when several MCP hosts each spawn their own server.
import assert from 'node:assert/strict';
import { test } from 'node:test';

import { call, connect, freshLedger, prepareArgs } from './helpers.mjs';

const PROCESSES = 4;
const PER_PROCESS = 10;

test('4 serve processes racing one intent admit exactly one attempt overall', async (t) => {
  const db = await freshLedger(t);
  const sessions = [];
  for (let p = 0; p < PROCESSES; p++) sessions.push(await connect(t, db, `host-${p}`));
  assert.equal(new Set(sessions.map((s) => s.pid)).size, PROCESSES);

  const racing = sessions.flatMap((s, p) => Array.from({ length: PER_PROCESS }, (_, i) =>
    call(s, 'fence_prepare', prepareArgs('charge:order-42', { agent: `agent-${p}-${i}` }))
      .then((r) => ({ ...r, process: p }))));
  const results = await Promise.all(racing);

  const fresh = results.filter((r) => r.sc.status === 'fresh');
  assert.equal(fresh.length, 1, `fresh: ${fresh.length}`);
  for (const r of results) {
    if (r.sc.status !== 'fresh') {
      assert.equal(r.sc.status, 'refused');
      assert.ok(['in_flight', 'domain_race'].includes(r.sc.reason), r.sc.reason);
    }
  }

  // The winner commits through its own process; every other process replays it.
  const winner = sessions[fresh[0].process];
  const committed = await call(winner, 'fence_commit', { prepared: fresh[0].sc.prepared, result: { charge: 'ch_42' } });
  assert.equal(committed.sc.status, 'committed');
  for (const s of sessions) {
    const replay = await call(s, 'fence_prepare', prepareArgs('charge:order-42'));
    assert.equal(replay.sc.status, 'already_done');
    assert.equal(replay.sc.cert.hash, committed.sc.cert.hash);
  }

  // Whole-ledger counters, once every process has closed and flushed its own.
  for (const s of sessions) await s.close();
  const observer = await connect(t, db, 'observer');
  const stats = await call(observer, 'fence_stats', {});
  assert.equal(stats.sc.ledger.admitted, 1);
  assert.equal(stats.sc.ledger.replayed, PROCESSES);
  assert.equal(stats.sc.ledger.total_attempts, PROCESSES * PER_PROCESS + PROCESSES);
  assert.equal(stats.sc.process.total_attempts, 0);
});
