// An identical call that arrives while the first one runs waits for its
// result (clients do send a call twice a few milliseconds apart), for up to
// --wait-secs (30 s by default); 0 refuses it at once, and a wait that runs
// out gets the same in_flight refusal. With the SDK client, through
// `effectfence wrap`, in front of the fixture server (its gated_effect runs
// until the test opens its gate, and logs each start).
import assert from 'node:assert/strict';
import { mkdir, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { test } from 'node:test';
import { setTimeout as delay } from 'node:timers/promises';

import { eventually, tempDir } from './helpers.mjs';
import { EFFECT_SERVER, NODE, connectWrapped, effectLog, textOf } from './wrap_helpers.mjs';

async function fixture(t) {
  const dir = await tempDir(t);
  const gates = path.join(dir, 'gates');
  await mkdir(gates);
  const log = path.join(dir, 'effects.jsonl');
  return {
    db: path.join(dir, 'ledger.sqlite'),
    child: [NODE, EFFECT_SERVER],
    env: { EFFECT_LOG: log, EFFECT_GATES: gates },
    open: (name) => writeFile(path.join(gates, name), ''),
    starts: (name) => effectLog(log).filter((e) => e.event === 'start' && e.name === name),
  };
}

// Two identical calls of gated_effect, the second a few milliseconds after
// the first; returns both promises once one of them has started. Which one
// is admitted is the ledger's to decide (the second may overtake the first).
async function twice(setup, wrapped, name) {
  const call = () => wrapped.client.callTool({ name: 'gated_effect', arguments: { name } });
  const first = call();
  await delay(5);
  const second = call();
  await eventually(() => setup.starts(name)[0], { what: `gated_effect ${name} to start` });
  return { first, second };
}

// The call answered while the gate is still closed (the refused one), and
// the other, still running.
async function refusedAndRunning({ first, second }) {
  const tagged = [first.then((r) => [0, r]), second.then((r) => [1, r])];
  const [index, refused] = await Promise.race(tagged);
  return { refused, running: tagged[1 - index].then(([, r]) => r) };
}

test('by default an identical call a few ms after the first waits and gets its result; the tool runs once',
  async (t) => {
    const setup = await fixture(t);
    const wrapped = await connectWrapped(t, setup);  // no --wait-secs: the default
    const { first, second } = await twice(setup, wrapped, 'twin');
    await eventually(() => /identical call to gated_effect is running .*waiting up to 30000 ms/.test(wrapped.stderr()),
      { what: 'the second call to wait (30 s by default)' });
    let answered = 0;
    for (const call of [first, second]) call.then(() => answered++, () => answered++);
    await delay(300);
    assert.equal(answered, 0, 'the second call waits, unanswered, instead of being refused');
    await setup.open('twin');
    const [a, b] = await Promise.all([first, second]);
    for (const r of [a, b]) assert.notEqual(r.isError, true, textOf(r));
    assert.deepEqual(b.content, a.content);
    assert.equal(a._meta.effectfence.certificate, b._meta.effectfence.certificate);
    assert.deepEqual([a._meta.effectfence.replayed, b._meta.effectfence.replayed].sort(), [false, true]);
    assert.equal(setup.starts('twin').length, 1, 'the tool ran once');
  });

test('--wait-secs 0: an identical call while one runs is refused at once, as before', async (t) => {
  const setup = await fixture(t);
  const wrapped = await connectWrapped(t, { ...setup, wrapArgs: ['--wait-secs', '0'] });
  const { refused, running } = await refusedAndRunning(await twice(setup, wrapped, 'now'));
  assert.equal(refused.isError, true);
  assert.equal(refused._meta.effectfence.refused, 'in_flight');
  assert.match(textOf(refused), /identical call to gated_effect is running right now/);
  await setup.open('now');
  assert.notEqual((await running).isError, true);
  assert.equal(setup.starts('now').length, 1);
});

test('a wait that runs out (the tool is slower than --wait-secs) gets the in_flight refusal', async (t) => {
  const setup = await fixture(t);
  const wrapped = await connectWrapped(t, { ...setup, wrapArgs: ['--wait-secs', '1'] });
  const began = Date.now();
  const { refused, running } = await refusedAndRunning(await twice(setup, wrapped, 'slow'));
  const waited = Date.now() - began;
  assert.equal(refused.isError, true);
  assert.equal(refused._meta.effectfence.refused, 'in_flight');
  assert.match(textOf(refused), /identical call to gated_effect is running right now/);
  assert.ok(waited >= 1000, `answered after ${waited} ms, before its 1 s wait ran out`);
  await setup.open('slow');
  const done = await running;
  assert.notEqual(done.isError, true, textOf(done));
  assert.equal(setup.starts('slow').length, 1, 'the tool ran once');
});
