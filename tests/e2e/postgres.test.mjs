// Replicas on one PostgreSQL ledger, as a gateway with several replicas runs
// them: `serve` and `wrap` processes, each with its own connection pool.
// Registered only against the throwaway cluster (EFFECTFENCE_TEST_LEDGER).
import assert from 'node:assert/strict';
import { mkdir, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { test } from 'node:test';
import { setTimeout as delay } from 'node:timers/promises';

import { call, connect, eventually, freshLedger, tempDir } from './helpers.mjs';
import { EFFECT_SERVER, NODE, connectWrapped, effectLog, textOf } from './wrap_helpers.mjs';

const SERVES = 4;
const WRAPS = 2;
const CALLS = 8;  // per process

async function effectFixture(t) {
  const dir = await tempDir(t);
  const gates = path.join(dir, 'gates');
  await mkdir(gates);
  const log = path.join(dir, 'effects.jsonl');
  return {
    child: [NODE, EFFECT_SERVER],
    env: { EFFECT_LOG: log, EFFECT_GATES: gates },
    open: (name) => writeFile(path.join(gates, name), ''),
    events: (event, name) => effectLog(log).filter((e) => e.event === event && e.name === name),
  };
}

test('4 serve and 2 wrap processes on one PostgreSQL ledger racing one intent: exactly one admission', async (t) => {
  assert.match(process.env.EFFECTFENCE_TEST_LEDGER ?? '', /^postgres/, 'runs against PostgreSQL only');
  const db = await freshLedger(t);
  const fx = await effectFixture(t);
  const serves = [];
  for (let p = 0; p < SERVES; p++) serves.push(await connect(t, db, `serve-${p}`));
  const wraps = [];
  for (let p = 0; p < WRAPS; p++) wraps.push(await connectWrapped(t, { db, child: fx.child, env: fx.env, name: `wrap-${p}`, wrapArgs: ['--wait-secs', '0'] }));

  // wrap names a keyed call "wrap:<tool>:<key>" on domain "tool:<tool>";
  // serve's clients name the very same action.
  const key = 'payout-42';
  const intent = { intent: `wrap:effect:${key}`, domain: 'tool:effect', tool: 'effect', args: { name: key } };
  const racing = [
    ...serves.flatMap((s, p) => Array.from({ length: CALLS }, (_, i) =>
      call(s, 'fence_prepare', { ...intent, agent: `serve-${p}-${i}` }).then((r) => ({ via: 'serve', p, r })))),
    ...wraps.flatMap((w, p) => Array.from({ length: CALLS }, () =>
      w.client.callTool({ name: 'effect', arguments: { name: key }, _meta: { idempotencyKey: key } })
        .then((r) => ({ via: 'wrap', p, r })))),
  ];
  const results = await Promise.all(racing);

  const fresh = results.filter((x) => x.via === 'serve' && x.r.sc.status === 'fresh');
  const ran = fx.events('run', key);
  assert.equal(fresh.length + ran.length, 1, `serve admissions: ${fresh.length}, effects run behind wrap: ${ran.length}`);
  for (const x of results) {
    if (x.via === 'serve' && x.r.sc.status !== 'fresh') {
      assert.equal(x.r.sc.status, 'refused');
      assert.ok(['in_flight', 'domain_race'].includes(x.r.sc.reason), x.r.sc.reason);
    }
    if (x.via === 'wrap' && x.r._meta?.effectfence?.replayed !== false) {
      assert.equal(x.r.isError, true, textOf(x.r));
      assert.equal(x.r._meta.effectfence.refused, 'in_flight');
    }
  }
  if (fresh.length === 1) {
    const committed = await call(serves[fresh[0].p], 'fence_commit',
      { prepared: fresh[0].r.sc.prepared, result: { did: key } });
    assert.equal(committed.sc.status, 'committed');
  }

  // Every replica now replays the one recorded outcome, and the ledger counted one admission.
  for (const s of serves) assert.equal((await call(s, 'fence_prepare', { ...intent, agent: 'late' })).sc.status, 'already_done');
  for (const w of wraps) {
    const replay = await w.client.callTool({ name: 'effect', arguments: { name: key }, _meta: { idempotencyKey: key } });
    assert.equal(replay._meta.effectfence.replayed, true, textOf(replay));
  }
  assert.equal(fx.events('run', key).length, ran.length, 'no replica ran the effect afterwards');
  const stats = await call(serves[0], 'fence_stats', {});
  assert.equal(stats.sc.ledger.admitted, 1);
});

test('a wrap replica killed with SIGKILL mid-effect: its intent is fenced, and stays fenced after its lease passes', async (t) => {
  const db = await freshLedger(t);
  const fx = await effectFixture(t);
  const env = { ...fx.env, EFFECTFENCE_LEASE_SECS: '1' };
  const doomed = await connectWrapped(t, { db, child: fx.child, env, name: 'doomed' });
  // The cluster trusts local connections: a password in the URL is accepted, and must never be shown.
  const secret = 'pw-shown-to-nobody';
  const withPassword = db.replace('://effectfence@', `://effectfence:${secret}@`);
  assert.notEqual(withPassword, db);
  const survivor = await connectWrapped(t, { db: withPassword, child: fx.child, env, name: 'survivor' });

  doomed.client.callTool({ name: 'gated_effect', arguments: { name: 'refund-9' } }).catch(() => {});
  const started = await eventually(() => fx.events('start', 'refund-9')[0], { what: 'the effect to start' });
  t.after(() => { try { process.kill(started.pid, 'SIGKILL'); } catch { /* already gone */ } });
  process.kill(doomed.pid, 'SIGKILL');
  // Twice the lease: a lapsed lease must not let the effect run again.
  await delay(2000);

  const retry = await survivor.client.callTool({ name: 'gated_effect', arguments: { name: 'refund-9' } });
  assert.equal(retry.isError, true, textOf(retry));
  assert.equal(retry._meta.effectfence.refused, 'prior_failure');
  assert.equal(retry._meta.effectfence.detail.state, 'unknown');
  assert.match(textOf(retry), /effectfence clear --db '?postgresql:\/\/effectfence:\*\*\*@/);
  assert.ok(!JSON.stringify(retry).includes(secret), 'the ledger password is not shown to the agent');
  assert.ok(!survivor.stderr().includes(secret), 'nor written to the log');
  assert.equal(fx.events('start', 'refund-9').length, 1, 'the effect started once');

  const watcher = await connect(t, db, 'watcher');
  const status = await call(watcher, 'fence_status', { intent: retry._meta.effectfence.intent });
  assert.equal(status.sc.intent.state, 'unknown');
  assert.match(status.sc.intent.reason, new RegExp(String(doomed.pid)));
});
