// The official MCP SDK client against one `effectfence serve`.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { test } from 'node:test';

import { McpError } from '@modelcontextprotocol/sdk/types.js';

import { BIN, call, connect, freshLedger, prepareArgs } from './helpers.mjs';

test('lists the six fence tools, each with an input and an output schema', async (t) => {
  const s = await connect(t, await freshLedger(t));
  assert.deepEqual(s.tools.map((tool) => tool.name),
    ['fence_prepare', 'fence_commit', 'fence_abort', 'fence_heartbeat', 'fence_status', 'fence_stats']);
  for (const tool of s.tools) {
    assert.equal(tool.inputSchema.type, 'object', tool.name);
    assert.equal(tool.outputSchema.type, 'object', tool.name);
    assert.ok(tool.description.length > 40, tool.name);
  }
  assert.equal(s.client.getServerVersion().name, 'effectfence');
  assert.ok(s.client.getInstructions().includes('fence_prepare'));
});

test('prepare, commit, then a duplicate prepare gets already_done with the same certificate', async (t) => {
  const s = await connect(t, await freshLedger(t));
  const fresh = await call(s, 'fence_prepare', prepareArgs('order-123'));
  assert.equal(fresh.isError, false);
  assert.equal(fresh.sc.status, 'fresh');

  const committed = await call(s, 'fence_commit', { prepared: fresh.sc.prepared, result: { charge: 'ch_1' } });
  assert.equal(committed.sc.status, 'committed');
  assert.match(committed.sc.cert.hash, /^[0-9a-f]{64}$/);

  const duplicate = await call(s, 'fence_prepare', prepareArgs('order-123'));
  assert.equal(duplicate.isError, false);
  assert.equal(duplicate.sc.status, 'already_done');
  assert.equal(duplicate.sc.cert.hash, committed.sc.cert.hash);
  assert.deepEqual(duplicate.sc.cert.result, { charge: 'ch_1' });

  const status = await call(s, 'fence_status', { intent: 'order-123' });
  assert.equal(status.sc.intent.state, 'done');
  assert.equal(status.sc.intent.cert.hash, committed.sc.cert.hash);
  assert.equal(status.sc.domain.seq, committed.sc.cert.seq);
});

test('50 concurrent prepares of one new intent: exactly one is fresh', async (t) => {
  const s = await connect(t, await freshLedger(t));
  const results = await Promise.all(
    Array.from({ length: 50 }, (_, i) => call(s, 'fence_prepare', prepareArgs('race-1', { agent: `agent-${i}` }))));
  const fresh = results.filter((r) => r.sc.status === 'fresh');
  assert.equal(fresh.length, 1);
  for (const r of results.filter((x) => x.sc.status !== 'fresh')) {
    assert.equal(r.isError, true);
    assert.equal(r.sc.status, 'refused');
    assert.ok(['in_flight', 'domain_race'].includes(r.sc.reason), r.sc.reason);
    assert.match(r.sc.message, /do not run the tool/);
  }
  const stats = await call(s, 'fence_stats', {});
  assert.equal(stats.sc.process.admitted, 1);
  assert.equal(stats.sc.process.total_attempts, 50);
  assert.equal(stats.sc.process.prevented, 49);
});

test('edited tickets are refused; the real one still commits', async (t) => {
  const s = await connect(t, await freshLedger(t));
  const { sc } = await call(s, 'fence_prepare', prepareArgs('order-7'));
  const ticket = sc.prepared;

  const edits = [
    { ...ticket, token: '0'.repeat(ticket.token.length) },
    { ...ticket, seq: ticket.seq + 1 },
    { ...ticket, generation: ticket.generation + 1 },
    { ...ticket, domain: 'order:other' },
    { intent: ticket.intent, token: ticket.token },
  ];
  for (const forged of edits) {
    const r = await call(s, 'fence_commit', { prepared: forged, result: 'forged' });
    assert.equal(r.isError, true, JSON.stringify(forged));
    assert.equal(r.sc.status, 'refused');
    assert.ok(['ticket_invalid', 'lease_lost'].includes(r.sc.reason), r.sc.reason);
  }
  const real = await call(s, 'fence_commit', { prepared: ticket, result: 'real' });
  assert.equal(real.sc.status, 'committed');
  assert.equal(real.sc.cert.result, 'real');
});

test('heartbeat extends; abort fences the intent until it is cleared', async (t) => {
  const db = await freshLedger(t);
  const s = await connect(t, db);
  const { sc } = await call(s, 'fence_prepare', prepareArgs('payout-9'));
  await new Promise((resolve) => setTimeout(resolve, 50));
  const beat = await call(s, 'fence_heartbeat', { prepared: sc.prepared });
  assert.equal(beat.sc.status, 'extended');
  assert.ok(beat.sc.lease_expires_at > sc.prepared.lease_expires_at_ms,
    `heartbeat moved the lease from ${sc.prepared.lease_expires_at_ms} to ${beat.sc.lease_expires_at}`);

  const aborted = await call(s, 'fence_abort', { prepared: sc.prepared, reason: 'bank timed out' });
  assert.equal(aborted.sc.status, 'aborted');
  assert.equal(aborted.sc.intent, 'payout-9');

  const status = await call(s, 'fence_status', { intent: 'payout-9' });
  assert.equal(status.sc.intent.state, 'failed');
  assert.match(status.sc.intent.reason, /bank timed out/);

  const retry = await call(s, 'fence_prepare', prepareArgs('payout-9'));
  assert.equal(retry.isError, true);
  assert.equal(retry.sc.reason, 'prior_failure');

  // An operator checks the bank, clears it, and the next prepare is fresh.
  const cleared = spawnSync(BIN, ['clear', '--db', db, 'payout-9', '--reason', 'bank shows no payout',
    '--operator', 'alice'], { encoding: 'utf8' });
  assert.equal(cleared.status, 0, cleared.stderr);
  const again = await call(s, 'fence_prepare', prepareArgs('payout-9'));
  assert.equal(again.sc.status, 'fresh');
});

test('bad arguments are refusals the model can read (an unknown tool is -32602), and the server keeps serving', async (t) => {
  const s = await connect(t, await freshLedger(t));
  const { intent, ...noIntent } = prepareArgs('x');
  assert.ok(intent);
  // MCP 2025-11-25: input validation errors are tool execution errors; the
  // SDK checks each against the tool's outputSchema.
  const missing = await s.client.callTool({ name: 'fence_prepare', arguments: noIntent });
  assert.equal(missing.isError, true);
  assert.equal(missing.structuredContent.reason, 'invalid_request');
  assert.match(missing.structuredContent.explanation, /intent/);
  const negative = await s.client.callTool({ name: 'fence_prepare', arguments: prepareArgs('x', { read_set: [{ domain: 'd', seq: -1 }] }) });
  assert.equal(negative.isError, true);
  assert.equal(negative.structuredContent.reason, 'invalid_request');
  await assert.rejects(s.client.callTool({ name: 'fence_nope', arguments: {} }),
    (e) => e instanceof McpError && e.code === -32602 && /unknown tool/.test(e.message));
  const ok = await call(s, 'fence_prepare', prepareArgs('x'));
  assert.equal(ok.sc.status, 'fresh');
});

test('fence_status is read-only: asking about an unknown intent creates nothing', async (t) => {
  const s = await connect(t, await freshLedger(t));
  const before = await call(s, 'fence_status', { intent: 'ghost', domain: 'nowhere' });
  assert.equal(before.sc.intent.state, 'none');
  assert.equal(before.sc.domain.exists, false);
  const again = await call(s, 'fence_status', { domain: 'nowhere' });
  assert.equal(again.sc.domain.exists, false);
  const stats = await call(s, 'fence_stats', {});
  assert.equal(stats.sc.ledger.total_attempts, 0);
});
