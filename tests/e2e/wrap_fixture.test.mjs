// effectfence wrap in front of a fixture server we control (a real MCP
// server over stdio, tests/e2e/fixtures/effect_server.mjs): a child killed
// mid-call, a tool slower than the lease, tool errors, the flags, and what
// passes through (list changes, progress, logging, cancellation).
import assert from 'node:assert/strict';
import { execFile, spawn } from 'node:child_process';
import { mkdir, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { promisify } from 'node:util';
import { test } from 'node:test';
import { setTimeout as delay } from 'node:timers/promises';

import {
  CreateMessageRequestSchema, ElicitRequestSchema, LoggingMessageNotificationSchema, ToolListChangedNotificationSchema,
} from '@modelcontextprotocol/sdk/types.js';

import { BIN, eventually, tempDir } from './helpers.mjs';
import {
  EFFECT_SERVER, NODE, allTools, connectDirect, connectWrapped, effectLog, effectfenceJson, textOf,
} from './wrap_helpers.mjs';

async function fixture(t, env = {}) {
  const dir = await tempDir(t);
  const gates = path.join(dir, 'gates');
  await mkdir(gates);
  const log = path.join(dir, 'effects.jsonl');
  return {
    db: path.join(dir, 'ledger.sqlite'),
    log,
    gates,
    child: [NODE, EFFECT_SERVER],
    env: { EFFECT_LOG: log, EFFECT_GATES: gates, ...env },
    open: (name) => writeFile(path.join(gates, name), ''),
    events: (event, name) => effectLog(log).filter((e) => e.event === event && (name === undefined || e.name === name)),
  };
}

function started(setup, name) {
  return eventually(() => setup.events('start', name)[0], { what: `gated_effect ${name} to start` });
}

test('the mirror follows every page of the fixture\'s tool list', async (t) => {
  const setup = await fixture(t);
  const straight = await connectDirect(t, setup);
  const wrapped = await connectWrapped(t, setup);
  const expected = await allTools(straight.client);
  assert.equal(expected.length, 8);
  const mirrored = await wrapped.client.listTools();
  assert.deepEqual(mirrored.tools, expected);
  assert.equal(wrapped.client.getInstructions(), 'a fixture for effectfence wrap');
});

test('a child killed mid-call: the call is fenced as unknown, and the next call runs on a new child', async (t) => {
  const setup = await fixture(t);
  const wrapped = await connectWrapped(t, setup);
  const pending = wrapped.client.callTool({ name: 'gated_effect', arguments: { name: 'payout-7' } });
  const { pid } = await started(setup, 'payout-7');
  process.kill(pid, 'SIGKILL');

  const result = await pending;
  assert.equal(result.isError, true);
  assert.match(textOf(result), /exited .* while running gated_effect/);
  assert.match(textOf(result), /unknown/);
  assert.equal(result._meta.effectfence.fenced, 'unknown');
  const { intent } = result._meta.effectfence;

  const fenced = await effectfenceJson('fenced', '--db', setup.db, '--json');
  const row = fenced.fenced.find((f) => f.intent === intent);
  assert.ok(row, `${intent} is listed as fenced`);
  assert.equal(row.state, 'unknown');

  const again = await wrapped.client.callTool({ name: 'gated_effect', arguments: { name: 'payout-7' } });
  assert.equal(again.isError, true);
  assert.equal(again._meta.effectfence.refused, 'prior_failure');
  assert.equal(again._meta.effectfence.detail.state, 'unknown');
  assert.match(textOf(again), /effectfence clear --db/);

  const next = await wrapped.client.callTool({ name: 'effect', arguments: { name: 'after-restart' } });
  assert.notEqual(next.isError, true, textOf(next));
  assert.equal(next.structuredContent.did, 'after-restart');
  assert.notEqual(next.structuredContent.pid, pid);
  assert.equal(setup.events('start', 'payout-7').length, 1, 'the fenced call never ran again');
});

test('a child killed mid-call while a process it started holds its output open: the call is still fenced as unknown at once, and the next call runs on a new child', async (t) => {
  const setup = await fixture(t, { EFFECT_HELPER: '1' });
  t.after(() => {
    for (const helper of setup.events('helper')) {
      try { process.kill(Number(helper.name), 'SIGKILL'); } catch { /* already gone */ }
    }
  });
  const wrapped = await connectWrapped(t, setup);
  const pending = wrapped.client.callTool({ name: 'gated_effect', arguments: { name: 'payout-8' } });
  const { pid } = await started(setup, 'payout-8');
  assert.equal(setup.events('helper').length, 1, 'the helper holds the child\'s stdout');
  process.kill(pid, 'SIGKILL');

  const result = await pending;
  assert.equal(result.isError, true);
  assert.equal(result._meta.effectfence.fenced, 'unknown');
  const next = await wrapped.client.callTool({ name: 'effect', arguments: { name: 'after-helper' } });
  assert.notEqual(next.isError, true, textOf(next));
  assert.notEqual(next.structuredContent.pid, pid);
  assert.equal(setup.events('start', 'payout-8').length, 1, 'the fenced call never ran again');
});

test('a tool slower than the lease is not run twice: its lease is kept while it runs', async (t) => {
  const setup = await fixture(t, { EFFECTFENCE_LEASE_SECS: '1' });
  const alice = await connectWrapped(t, { ...setup, name: 'alice' });
  // Refused at once rather than waiting for alice's result (--wait-secs).
  const bob = await connectWrapped(t, { ...setup, name: 'bob', wrapArgs: ['--wait-secs', '0'] });
  const slow = alice.client.callTool({ name: 'gated_effect', arguments: { name: 'slow' } });
  await started(setup, 'slow');
  // The lease really is one second (each admission or heartbeat sets it to now + 1 s).
  const { stdout: lease } = await promisify(execFile)('sqlite3', [setup.db,
    "SELECT lease_expires_at - updated_at FROM intents WHERE state = 'in_flight'"]);
  assert.equal(lease.trim(), '1000');
  // Without heartbeats the lease would have run out twice over by now. Bob's
  // wrap runs on this host, where a holder seen running keeps its intent
  // anyway, so the ledger shows what the heartbeats did: moved the lease on
  // (a holder on another host is kept by nothing else).
  await delay(2500);
  const { stdout: moved } = await promisify(execFile)('sqlite3', [setup.db,
    "SELECT lease_expires_at - admitted_at FROM intents WHERE state = 'in_flight'"]);
  assert.ok(Number(moved.trim()) >= 1500, `heartbeats moved the lease ${moved.trim()} ms past its admission`);
  const duplicate = await bob.client.callTool({ name: 'gated_effect', arguments: { name: 'slow' } });
  assert.equal(duplicate.isError, true);
  assert.equal(duplicate._meta.effectfence.refused, 'in_flight');
  assert.match(textOf(duplicate), /identical call to gated_effect is running/);

  await setup.open('slow');
  const done = await slow;
  assert.notEqual(done.isError, true, textOf(done));
  const replay = await bob.client.callTool({ name: 'gated_effect', arguments: { name: 'slow' } });
  assert.equal(replay._meta.effectfence.replayed, true);
  assert.deepEqual(replay.content, done.content);
  assert.equal(setup.events('start', 'slow').length, 1);
});

test('a call stalled writing to a busy child keeps its intent after its lease: an identical call is refused, never run twice', async (t) => {
  const setup = await fixture(t, { EFFECTFENCE_LEASE_SECS: '1' });
  const wrapped = await connectWrapped(t, { ...setup, wrapArgs: ['--wait-secs', '0'] });  // refused, not waiting
  const busy = wrapped.client.callTool({ name: 'blocking_effect', arguments: { name: 'busy', ms: 5000 } });
  await started(setup, 'busy');
  // More than a pipe holds: wrap's write of this call to the blocked child
  // stalls, and no heartbeat keeps its one-second lease meanwhile.
  const big = `big-${'x'.repeat(300_000)}`;
  const first = wrapped.client.callTool({ name: 'effect', arguments: { name: big } });
  await delay(2500);
  const duplicate = await wrapped.client.callTool({ name: 'effect', arguments: { name: big } });
  assert.equal(duplicate.isError, true);
  assert.equal(duplicate._meta.effectfence.refused, 'in_flight');

  const done = await first;
  assert.notEqual(done.isError, true, textOf(done));
  assert.ok(done._meta.effectfence.certificate, 'the stalled call is recorded once it runs');
  await busy;
  assert.equal(setup.events('run', big).length, 1, 'the effect ran once');
});

test('a child that stops reading holds up no one else: a cancellation is queued and wrap keeps answering', async (t) => {
  const setup = await fixture(t);
  const wrapped = await connectWrapped(t, setup);
  const cancel = new AbortController();
  const busy = wrapped.client.callTool({ name: 'blocking_effect', arguments: { name: 'busy', ms: 6000 } }, undefined,
    { signal: cancel.signal });
  busy.catch(() => {});
  await started(setup, 'busy');
  // A write wrap cannot finish while the child blocks: it holds the child's input.
  const stalled = wrapped.client.callTool({ name: 'effect', arguments: { name: `big-${'x'.repeat(300_000)}` } });
  await delay(300);
  cancel.abort('the agent gave up');  // notifications/cancelled, read by wrap's one reader
  await wrapped.client.ping();
  assert.equal(setup.events('done', 'busy').length, 0, 'wrap answered while the child was still blocked');
  await stalled;
});

test('a tool error fences the call as failed by default; --on-tool-error=release lets a retry run', async (t) => {
  for (const [mode, wrapArgs, runs] of [['default', [], 1], ['release', ['--on-tool-error=release'], 2]]) {
    const setup = await fixture(t);
    const wrapped = await connectWrapped(t, { ...setup, wrapArgs });
    const first = await wrapped.client.callTool({ name: 'failing_effect', arguments: { name: 'x' } });
    assert.equal(first.isError, true);
    assert.match(textOf(first), /could not do x/, 'the tool\'s own error reaches the agent');
    const retry = await wrapped.client.callTool({ name: 'failing_effect', arguments: { name: 'x' } });
    assert.equal(retry.isError, true);
    assert.equal(setup.events('run', 'x').length, runs, mode);
    if (mode === 'default') {
      assert.equal(retry._meta.effectfence.refused, 'prior_failure');
      assert.match(textOf(retry), /could not do x/, 'the refusal names the recorded error');
    }
  }
});

test('read-only tools pass through unless --fence-all; --only and --except choose', async (t) => {
  const cases = [
    { wrapArgs: [], tool: 'peek', event: 'peek', runs: 2 },
    { wrapArgs: ['--fence-all'], tool: 'peek', event: 'peek', runs: 1 },
    { wrapArgs: ['--only', 'peek'], tool: 'effect', event: 'run', runs: 2 },
    { wrapArgs: ['--only', 'peek'], tool: 'peek', event: 'peek', runs: 1 },
    { wrapArgs: ['--except', 'effect'], tool: 'effect', event: 'run', runs: 2 },
  ];
  for (const c of cases) {
    const setup = await fixture(t);
    const wrapped = await connectWrapped(t, { ...setup, wrapArgs: c.wrapArgs });
    for (let i = 0; i < 2; ++i) await wrapped.client.callTool({ name: c.tool, arguments: { name: 'n' } });
    assert.equal(setup.events(c.event, 'n').length, c.runs, `${c.wrapArgs.join(' ')} ${c.tool}`);
  }
});

test('an agent\'s own idempotency key is the intent, with payload-mismatch checking', async (t) => {
  const setup = await fixture(t);
  const wrapped = await connectWrapped(t, { ...setup, wrapArgs: ['--key-arg', 'idempotency_key'] });
  const call = (args, meta) => wrapped.client.callTool({ name: 'effect', arguments: args, ...(meta ? { _meta: meta } : {}) });

  const first = await call({ name: 'a' }, { idempotencyKey: 'order-1' });
  assert.equal(first._meta.effectfence.intent, 'wrap:effect:order-1');
  const same = await call({ name: 'a' }, { idempotencyKey: 'order-1' });
  assert.equal(same._meta.effectfence.replayed, true);
  const other = await call({ name: 'b' }, { idempotencyKey: 'order-1' });
  assert.equal(other.isError, true);
  assert.equal(other._meta.effectfence.refused, 'payload_mismatch');
  assert.match(textOf(other), /idempotency key/);

  const byArg = await call({ name: 'c', idempotency_key: 'order-2' });
  assert.equal(byArg._meta.effectfence.intent, 'wrap:effect:order-2');
  const byArgAgain = await call({ name: 'c', idempotency_key: 'order-2' });
  assert.equal(byArgAgain._meta.effectfence.replayed, true);
  assert.deepEqual(setup.events('run').map((e) => e.name), ['a', 'c']);
});

test('--wait-secs: an identical call waits for the running one and gets its result', async (t) => {
  const setup = await fixture(t);
  const wrapped = await connectWrapped(t, { ...setup, wrapArgs: ['--wait-secs', '60'] });
  const first = wrapped.client.callTool({ name: 'gated_effect', arguments: { name: 'w' } });
  await started(setup, 'w');
  const second = wrapped.client.callTool({ name: 'gated_effect', arguments: { name: 'w' } });
  await eventually(() => /identical call to gated_effect is running .*waiting up to/.test(wrapped.stderr()),
    { what: 'the second call to wait' });
  await setup.open('w');
  const [a, b] = await Promise.all([first, second]);
  assert.notEqual(b.isError, true, textOf(b));
  assert.equal(b._meta.effectfence.replayed, true);
  assert.deepEqual(b.content, a.content);
  assert.equal(setup.events('start', 'w').length, 1);
});

test('--wait-secs: a waiting call stops waiting when wrap is told to stop, and wrap exits at once', async (t) => {
  const setup = await fixture(t);
  const running = await connectWrapped(t, { ...setup, name: 'running' });
  const waiting = await connectWrapped(t, { ...setup, name: 'waiting', wrapArgs: ['--wait-secs', '3600'] });
  const first = running.client.callTool({ name: 'gated_effect', arguments: { name: 'long' } });
  await started(setup, 'long');
  const second = waiting.client.callTool({ name: 'gated_effect', arguments: { name: 'long' } });
  await eventually(() => /waiting up to/.test(waiting.stderr()), { what: 'the second call to wait' });
  process.kill(waiting.pid, 'SIGTERM');
  const refused = await second;
  assert.equal(refused._meta.effectfence.refused, 'in_flight');
  // The clean way out (exit 0) ends with this line, while the other call still runs.
  await eventually(() => /ledger closed; bye/.test(waiting.stderr()), { what: 'the waiting wrap to exit' });
  await setup.open('long');
  assert.notEqual((await first).isError, true);
  assert.equal(setup.events('start', 'long').length, 1);
});

test('list changes, progress and log messages pass through; a cancellation reaches the child', async (t) => {
  const setup = await fixture(t);
  const wrapped = await connectWrapped(t, setup);
  const changed = new Promise((resolve) => {
    wrapped.client.setNotificationHandler(ToolListChangedNotificationSchema, () => resolve());
  });
  const logged = [];
  wrapped.client.setNotificationHandler(LoggingMessageNotificationSchema, (n) => { logged.push(n.params.data); });

  await wrapped.client.callTool({ name: 'add_tool', arguments: { name: 'fresh_tool' } });
  await changed;
  const names = (await wrapped.client.listTools()).tools.map((tool) => tool.name);
  assert.ok(names.includes('fresh_tool'), names.join(','));

  const progress = [];
  let progressed;
  const firstProgress = new Promise((resolve) => { progressed = resolve; });
  const gated = wrapped.client.callTool({ name: 'gated_effect', arguments: { name: 'p' } }, undefined, {
    onprogress: (p) => { progress.push(p); progressed(); },
  });
  await firstProgress;
  assert.equal(progress[0].message, 'waiting for the gate');
  await setup.open('p');
  await gated;
  await eventually(() => logged.includes('gated_effect p is waiting'), { what: 'the child\'s log message' });

  const controller = new AbortController();
  const cancelled = wrapped.client.callTool({ name: 'gated_effect', arguments: { name: 'c' } }, undefined,
    { signal: controller.signal });
  await started(setup, 'c');
  controller.abort('changed my mind');
  await assert.rejects(cancelled);
  await eventually(() => setup.events('cancelled', 'c').length === 1, { what: 'the child to see the cancellation' });
  // Cancelled mid-run, its effect may have happened: an identical call is refused, never re-run.
  const retry = await eventually(async () => {
    const r = await wrapped.client.callTool({ name: 'gated_effect', arguments: { name: 'c' } });
    return r._meta.effectfence.refused === 'prior_failure' ? r : null;
  }, { what: 'the cancelled call to be fenced' });
  assert.equal(retry.isError, true);
  assert.match(textOf(retry), /the child may still be running it: check the provider, and that the child has finished/,
    'the person who would clear it is told the child may still be at it');
  assert.equal(setup.events('start', 'c').length, 1);
});

// wrap in front of the fixture, for an agent that declares capability and
// answers each request of schema with answer(how many it has been asked so
// far); asked collects the requests' params.
async function connectAnswering(t, setup, capability, schema, answer) {
  const asked = [];
  const wrapped = await connectWrapped(t, {
    ...setup,
    capabilities: { [capability]: {} },
    prepare: (client) => client.setRequestHandler(schema, async (request) => {
      asked.push(request.params);
      return answer(asked.length);
    }),
  });
  return { wrapped, asked };
}

test('a fenced tool that asks the agent for sampling mid-call: the agent answers through wrap, and the call runs once',
  async (t) => {
    const setup = await fixture(t);
    const { wrapped, asked } = await connectAnswering(t, setup, 'sampling', CreateMessageRequestSchema,
      (count) => ({ role: 'assistant', model: 'e2e-model', content: { type: 'text', text: `forty-two (${count})` } }));
    // A fenced call in flight meanwhile must not hold the sampling request up, nor be held up by it.
    const gated = wrapped.client.callTool({ name: 'gated_effect', arguments: { name: 'busy' } });
    await started(setup, 'busy');

    const first = await wrapped.client.callTool({ name: 'ask_agent', arguments: { name: 'q1' } });
    assert.notEqual(first.isError, true, textOf(first));
    assert.equal(textOf(first), 'the agent said: forty-two (1) (model e2e-model)');
    assert.equal(first._meta.effectfence.replayed, false, 'ask_agent is fenced');
    assert.equal(asked.length, 1);
    assert.equal(asked[0].messages[0].content.text, 'what about q1?');
    assert.equal(asked[0].maxTokens, 20);

    const second = await wrapped.client.callTool({ name: 'ask_agent', arguments: { name: 'q1' } });
    assert.equal(second._meta.effectfence.replayed, true);
    assert.deepEqual(second.content, first.content);
    assert.equal(asked.length, 1, 'the replay asks nobody');
    assert.equal(setup.events('run', 'q1').length, 1);

    await setup.open('busy');
    assert.notEqual((await gated).isError, true);
  });

test('a fenced tool that asks a person through elicitation: the agent\'s answer reaches it through wrap, once', async (t) => {
  const setup = await fixture(t);
  const { wrapped, asked } = await connectAnswering(t, setup, 'elicitation', ElicitRequestSchema,
    () => ({ action: 'accept', content: { approver: 'alice' } }));
  const first = await wrapped.client.callTool({ name: 'confirm_effect', arguments: { name: 'refund-9' } });
  assert.notEqual(first.isError, true, textOf(first));
  assert.equal(textOf(first), 'did refund-9, confirmed by alice');
  assert.equal(asked.length, 1);
  assert.equal(asked[0].message, 'confirm refund-9?');
  const again = await wrapped.client.callTool({ name: 'confirm_effect', arguments: { name: 'refund-9' } });
  assert.equal(again._meta.effectfence.replayed, true);
  assert.equal(asked.length, 1, 'the replay asks nobody');
  assert.equal(setup.events('run', 'refund-9').length, 1);
});

test('a client without sampling: the fixture\'s request is refused, as it would be straight', async (t) => {
  const setup = await fixture(t);
  const wrapped = await connectWrapped(t, setup);
  const result = await wrapped.client.callTool({ name: 'ask_agent', arguments: { name: 'q2' } });
  assert.match(textOf(result), /^the agent gave no answer: .*-32601.*sampling\/createMessage/);
  assert.equal(setup.events('refused', 'q2').length, 1);
  assert.match(wrapped.stderr(), /the child asked for sampling\/createMessage, which the agent does not offer/);
});

test('a child that cannot be started: the agent\'s initialize is answered with the reason, and wrap exits 1', async (t) => {
  const dir = await tempDir(t);
  const wrap = spawn(BIN, ['wrap', '--db', path.join(dir, 'ledger.sqlite'), '--', '/nonexistent/effectfence-server', 'x'],
    { stdio: ['pipe', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  wrap.stdout.on('data', (chunk) => { stdout += chunk; });
  wrap.stderr.on('data', (chunk) => { stderr += chunk; });
  const exited = new Promise((resolve) => wrap.on('exit', (code) => resolve(code)));
  // Nothing is started before the agent says initialize.
  await delay(300);
  assert.doesNotMatch(stderr, /cannot start/);
  wrap.stdin.write(`${JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'initialize',
    params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'e2e', version: '1' } } })}\n`);
  assert.equal(await exited, 1);
  const answer = JSON.parse(stdout.trim());
  assert.equal(answer.id, 1);
  assert.match(answer.error.message, /^cannot start \/nonexistent\/effectfence-server x: .*No such file or directory/);
  assert.match(stderr, /error: cannot start \/nonexistent\/effectfence-server x: /);
});

test('a call that never ends does not hold wrap forever: a stop signal while it finishes fences it as unknown', { timeout: 60_000 }, async (t) => {
  const setup = await fixture(t);
  const wrap = spawn(BIN, ['wrap', '--db', setup.db, '--', ...setup.child],
    { stdio: ['pipe', 'pipe', 'pipe'], env: { ...process.env, ...setup.env } });
  t.after(() => wrap.kill('SIGKILL'));
  let stdout = '';
  let stderr = '';
  wrap.stdout.on('data', (chunk) => { stdout += chunk; });
  wrap.stderr.on('data', (chunk) => { stderr += chunk; });
  const exited = new Promise((resolve) => wrap.on('exit', (code) => resolve(code)));
  const send = (message) => wrap.stdin.write(`${JSON.stringify({ jsonrpc: '2.0', ...message })}\n`);
  send({ id: 1, method: 'initialize',
    params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'e2e', version: '1' } } });
  send({ method: 'notifications/initialized' });
  send({ id: 2, method: 'tools/call', params: { name: 'gated_effect', arguments: { name: 'stuck-1' } } });
  await started(setup, 'stuck-1');

  // stdin ends: wrap waits for the call (its result would be recorded)...
  wrap.stdin.end();
  await eventually(() => /stdin closed: stopping; finishing 1 call/.test(stderr), { what: 'wrap to start finishing' });
  await delay(1000);
  assert.equal(wrap.exitCode, null, 'wrap waits for the call in flight');
  // ...until a stop signal says not to: the child is stopped, the call fenced.
  wrap.kill('SIGTERM');
  assert.equal(await exited, 0);
  assert.match(stderr, /stopping the child server now/);
  const answer = stdout.trim().split('\n').map((line) => JSON.parse(line)).find((m) => m.id === 2);
  assert.ok(answer, 'the call is answered');
  const fenced = await effectfenceJson('fenced', '--db', setup.db, '--json');
  assert.deepEqual(fenced.fenced.map((f) => [f.tool, f.state]), [['gated_effect', 'unknown']]);
});
