// MCP 2026-07-28 beside the 2025 revisions: the v2 SDK client
// (@modelcontextprotocol/client) in its three negotiation modes ('legacy':
// initialize; 'auto': probe with server/discover, fall back to initialize;
// pinned 2026-07-28: stateless requests only) against serve, serve --shared
// (through the stdio bridge and straight over HTTP) and wrap, all on one
// ledger per test, so one fence must hold across the revisions.
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { writeFile, readFile } from 'node:fs/promises';
import path from 'node:path';
import { createInterface } from 'node:readline';
import { describe, test as serial } from 'node:test';

import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';
import { StdioClientTransport } from '@modelcontextprotocol/client/stdio';

import { BIN, eventually, lockLedger, prepareArgs, tempDir } from './helpers.mjs';
import { EFFECT_SERVER, FILESYSTEM, NODE } from './wrap_helpers.mjs';

const MODES = [
  { label: 'legacy', mode: 'legacy', era: '2025-11-25' },
  { label: 'auto', mode: 'auto', era: '2026-07-28' },
  { label: 'pinned', mode: { pin: '2026-07-28' }, era: '2026-07-28' },
];
const FAST = {
  EFFECTFENCE_SHARED_IDLE_MS: '300',
  EFFECTFENCE_SHARED_BIND_DEADLINE_MS: '1500',
  EFFECTFENCE_SHARED_ELECTION_MS: '10000',
};
const ENVELOPE = {
  'io.modelcontextprotocol/protocolVersion': '2026-07-28',
  'io.modelcontextprotocol/clientInfo': { name: 'raw', version: '1' },
  'io.modelcontextprotocol/clientCapabilities': {},
};

// A v2 client on a stdio server; closed when the test ends.
async function stdioClient(t, { args, mode, name, env = {} }) {
  const transport = new StdioClientTransport({ command: BIN, args, env: { ...process.env, ...FAST, ...env }, stderr: 'pipe' });
  let stderr = '';
  transport.stderr?.on('data', (chunk) => { stderr += chunk; });
  const client = new Client({ name, version: '1.0.0' }, { versionNegotiation: { mode } });
  await client.connect(transport);
  t.after(async () => {
    await client.close();
    assert.doesNotMatch(stderr, /Sanitizer|runtime error:/);
  });
  return client;
}

async function httpClient(t, { url, token }, mode) {
  const transport = new StreamableHTTPClientTransport(new URL(url), {
    requestInit: { headers: { Authorization: `Bearer ${token}` } },
  });
  const client = new Client({ name: 'http', version: '1.0.0' }, { versionNegotiation: { mode } });
  await client.connect(transport);
  t.after(() => client.close());
  return { client, transport };
}

// Side by side: most of each test's time is waiting on processes.
const tests = [];
const test = (name, fn) => tests.push([name, fn]);

const sc = async (client, name, args) => (await client.callTool({ name, arguments: args })).structuredContent;

// One intent per client, then one intent all share: the first commits it,
// every other gets the recorded outcome, whatever revision it speaks.
async function oneFence(clients) {
  for (const [i, client] of clients.entries()) {
    const own = await sc(client, 'fence_prepare', prepareArgs(`own:${i}`));
    assert.equal(own.status, 'fresh', JSON.stringify(own));
    assert.equal((await sc(client, 'fence_commit', { prepared: own.prepared, result: { i } })).status, 'committed');
  }
  const first = await sc(clients[0], 'fence_prepare', prepareArgs('together'));
  assert.equal(first.status, 'fresh');
  for (const client of clients.slice(1)) {
    assert.equal((await sc(client, 'fence_prepare', prepareArgs('together'))).reason, 'in_flight');
  }
  await sc(clients[0], 'fence_commit', { prepared: first.prepared, result: { ok: true } });
  for (const client of clients.slice(1)) {
    assert.equal((await sc(client, 'fence_prepare', prepareArgs('together'))).status, 'already_done');
  }
}

const FENCE_TOOLS = ['fence_abort', 'fence_commit', 'fence_heartbeat', 'fence_prepare', 'fence_stats', 'fence_status'];

test('serve over stdio: legacy, auto and pinned 2026-07-28 clients are each served their revision, on one fence', async (t) => {
  const db = path.join(await tempDir(t), 'ledger.sqlite');
  const clients = [];
  for (const { label, mode, era } of MODES) {
    const client = await stdioClient(t, { args: ['serve', '--db', db], mode, name: label });
    assert.equal(client.getNegotiatedProtocolVersion(), era, label);
    assert.deepEqual((await client.listTools()).tools.map((x) => x.name).sort(), FENCE_TOOLS);
    clients.push(client);
  }
  await oneFence(clients);
});

// Raw lines to a serve process: what the revision requires, byte by byte.
function rawServe(t, db) {
  const child = spawn(BIN, ['serve', '--db', db], { stdio: ['pipe', 'pipe', 'inherit'] });
  t.after(() => child.kill('SIGKILL'));
  const answers = new Map();
  const waiters = new Map();
  createInterface({ input: child.stdout }).on('line', (line) => {
    const message = JSON.parse(line);
    if (message.id === undefined) answers.set(message.method, message);
    const key = JSON.stringify(message.id ?? null);
    if (waiters.has(key)) waiters.get(key)(message);
    else answers.set(key, message);
  });
  const send = (id, method, params) => new Promise((resolve) => {
    const key = JSON.stringify(id);
    if (answers.has(key)) return resolve(answers.get(key));
    waiters.set(key, resolve);
    child.stdin.write(`${JSON.stringify({ jsonrpc: '2.0', id, method, params })}\n`);
  });
  send.answers = answers;  // notifications by method, and answers nobody waited for
  return send;
}

test('stdio, raw: server/discover, stateless results, -32022 for an unknown revision, -32602 for a bad envelope; 2025 unchanged', async (t) => {
  const send = rawServe(t, path.join(await tempDir(t), 'ledger.sqlite'));
  const discover = await send(1, 'server/discover', { _meta: ENVELOPE });
  assert.deepEqual(discover.result.supportedVersions, ['2026-07-28', '2025-11-25', '2025-06-18', '2025-03-26', '2024-11-05']);
  assert.equal(discover.result.resultType, 'complete');
  assert.equal(discover.result._meta['io.modelcontextprotocol/serverInfo'].name, 'effectfence');
  const list = await send(2, 'tools/list', { _meta: ENVELOPE });
  assert.equal(list.result.resultType, 'complete');
  assert.equal(list.result.ttlMs, 0);
  assert.equal(list.result.cacheScope, 'private');
  const call = await send(3, 'tools/call', { name: 'fence_stats', arguments: {}, _meta: ENVELOPE });
  assert.equal(call.result.resultType, 'complete');
  assert.equal(call.result.structuredContent.status, 'ok');

  const future = await send(4, 'tools/list', { _meta: { ...ENVELOPE, 'io.modelcontextprotocol/protocolVersion': '2099-01-01' } });
  assert.equal(future.error.code, -32022);
  assert.equal(future.error.data.requested, '2099-01-01');
  assert.ok(future.error.data.supported.includes('2026-07-28'));
  const noCapabilities = { ...ENVELOPE };
  delete noCapabilities['io.modelcontextprotocol/clientCapabilities'];
  const bad = await send(5, 'tools/list', { _meta: noCapabilities });
  assert.equal(bad.error.code, -32602);
  assert.match(bad.error.message, /clientCapabilities/);

  const listening = send(7, 'subscriptions/listen', { notifications: { toolsListChanged: true, promptsListChanged: true }, _meta: ENVELOPE });
  await send(8, 'ping', { _meta: ENVELOPE });  // answered after the acknowledgement, in order
  const ack = send.answers.get('notifications/subscriptions/acknowledged');
  assert.deepEqual(ack.params.notifications, { toolsListChanged: true });  // prompts: none offered
  assert.equal(ack.params._meta['io.modelcontextprotocol/subscriptionId'], 7);
  assert.equal(send.answers.has('7'), false);  // a subscription is never answered, only cancelled
  void listening;

  // The negative control: a 2025 request gets no 2026 fields.
  const legacy = await send(6, 'tools/list', {});
  assert.equal(legacy.result.resultType, undefined);
  assert.equal(legacy.result.ttlMs, undefined);
});

test('serve --shared: bridge clients and HTTP clients of every mode on one shared server at once, one fence', async (t) => {
  const db = path.join(await tempDir(t), 'ledger.sqlite');
  const clients = [];
  for (const { label, mode, era } of MODES) {
    const client = await stdioClient(t, { args: ['serve', '--shared', '--db', db], mode, name: `bridge-${label}` });
    assert.equal(client.getNegotiatedProtocolVersion(), era, label);
    clients.push(client);
  }
  const lease = JSON.parse(await readFile(`${db}.server.json`, 'utf8'));
  for (const { label, mode, era } of MODES) {
    const { client, transport } = await httpClient(t, lease, mode);
    assert.equal(client.getNegotiatedProtocolVersion(), era, label);
    // Only the 2025 revision opens a session.
    assert.equal(transport.sessionId === undefined, era === '2026-07-28', label);
    assert.deepEqual((await client.listTools()).tools.map((x) => x.name).sort(), FENCE_TOOLS);
    clients.push(client);
  }
  await oneFence(clients);
  // Every client went through the one server.
  const log = await readFile(`${db}.server.log`, 'utf8');
  assert.equal((log.match(/serving sqlite:/g) || []).length, 1, log);
});

// n requests are in the shared server's hands, waiting behind the locked
// ledger (a fixed sleep is not enough on a loaded machine: a request
// aborted before the server read it cancels nothing).
async function inServersHands(url, token, n) {
  await eventually(async () => {
    const text = await (await fetch(url.replace(/\/mcp$/, '/metrics'), { headers: { Authorization: `Bearer ${token}` } })).text();
    const taken = /^effectfence_http_requests_in_progress (\d+)/m.exec(text);
    return taken && Number(taken[1]) >= n;
  }, { what: `${n} request(s) in the server's hands` });
}

// The shared server took the request and saw its connection close (only
// then is the retry sure to be decided after it).
async function serverSawCancel(db) {
  await eventually(async () => /tools\/call \S+: the client closed its connection before the answer; cancelled/
    .test(await readFile(`${db}.server.log`, 'utf8')), { what: 'the shared server to see the connection close' });
}

function withdrawals(db, intent) {
  const out = spawnSync('sqlite3', [db, `SELECT count(*) FROM events WHERE intent = '${intent}' AND kind = 'cleared' AND json_extract(detail, '$.reason') LIKE 'withdrawn: %'`]);
  return Number(String(out.stdout).trim());
}

// Retries a prepare until it is no longer refused in_flight (a withdrawal
// is written in the background); returns the last answer.
async function retried(prepare) {
  let answer;
  await eventually(async () => {
    answer = await prepare();
    return answer.status !== 'refused' || answer.reason !== 'in_flight';
  }, { timeoutMs: 8000, what: 'the withdrawn admission to be gone' });
  return answer;
}

test('HTTP: a client that drops the connection of a waiting fence_prepare cancels it: withdrawn, the retry is fresh; a kept connection is not', async (t) => {
  const db = path.join(await tempDir(t), 'ledger.sqlite');
  await stdioClient(t, { args: ['serve', '--shared', '--db', db], mode: 'legacy', name: 'starter' });  // starts the server
  const { url, token } = JSON.parse(await readFile(`${db}.server.json`, 'utf8'));
  let next = 1;
  const post = (intent, signal) => fetch(url, {
    method: 'POST',
    signal,
    headers: {
      Authorization: `Bearer ${token}`, 'Content-Type': 'application/json', Accept: 'application/json, text/event-stream',
      'MCP-Protocol-Version': '2026-07-28', 'Mcp-Method': 'tools/call', 'Mcp-Name': 'fence_prepare',
    },
    body: JSON.stringify({ jsonrpc: '2.0', id: next++, method: 'tools/call', params: { name: 'fence_prepare', arguments: prepareArgs(intent), _meta: ENVELOPE } }),
  }).then(async (res) => (await res.json()).result.structuredContent);

  const unlock = await lockLedger(t, db);
  const dropped = new AbortController();
  const gone = post('dropped', dropped.signal).catch((e) => e);
  const kept = post('kept');  // the negative control: same wait, connection kept
  await inServersHands(url, token, 2);  // both prepares
  dropped.abort();
  assert.equal((await gone).name, 'AbortError');
  await serverSawCancel(db);
  await unlock();

  const admitted = await kept;
  assert.equal(admitted.status, 'fresh');
  assert.equal((await post('kept')).reason, 'in_flight');  // delivered: held for its holder
  const retry = await retried(() => post('dropped'));
  assert.equal(retry.status, 'fresh', JSON.stringify(retry));
  assert.equal(retry.prepared.generation, 2);  // the withdrawn admission was the first
  assert.equal(withdrawals(db, 'dropped'), 1);
  assert.equal(withdrawals(db, 'kept'), 0);

  // No stream that would hold a thread for changes that never come: refused by name.
  const listen = await fetch(url, {
    method: 'POST',
    headers: {
      Authorization: `Bearer ${token}`, 'Content-Type': 'application/json', Accept: 'application/json',
      'MCP-Protocol-Version': '2026-07-28', 'Mcp-Method': 'subscriptions/listen',
    },
    body: JSON.stringify({ jsonrpc: '2.0', id: 'l', method: 'subscriptions/listen', params: { notifications: { toolsListChanged: true }, _meta: ENVELOPE } }),
  }).then((res) => res.json());
  assert.equal(listen.error.code, -32601);
  assert.match(listen.error.message, /subscriptions\/listen is not offered over HTTP/);
});

test('HTTP: a stateless request whose headers disagree with its body, or lack one, is refused 400 -32020 and decides nothing', async (t) => {
  const db = path.join(await tempDir(t), 'ledger.sqlite');
  await stdioClient(t, { args: ['serve', '--shared', '--db', db], mode: 'legacy', name: 'starter' });  // starts the server
  const { url, token } = JSON.parse(await readFile(`${db}.server.json`, 'utf8'));
  const standard = { 'MCP-Protocol-Version': '2026-07-28', 'Mcp-Method': 'tools/call', 'Mcp-Name': 'fence_prepare' };
  const post = async (headers) => {
    const res = await fetch(url, {
      method: 'POST',
      headers: { Authorization: `Bearer ${token}`, 'Content-Type': 'application/json', Accept: 'application/json', ...headers },
      body: JSON.stringify({ jsonrpc: '2.0', id: 9, method: 'tools/call', params: { name: 'fence_prepare', arguments: prepareArgs('headers'), _meta: ENVELOPE } }),
    });
    return { status: res.status, body: await res.json() };
  };
  for (const [name, wrong] of [['MCP-Protocol-Version', '2025-11-25'], ['Mcp-Method', 'tools/list'], ['Mcp-Name', 'fence_commit']]) {
    const mismatched = await post({ ...standard, [name]: wrong });
    assert.equal(mismatched.status, 400, `${name}: ${JSON.stringify(mismatched)}`);
    assert.equal(mismatched.body.error.code, -32020);
    assert.equal(mismatched.body.id, 9);
    assert.match(mismatched.body.error.message, new RegExp(`header mismatch: ${name}`));
    const { [name]: _, ...without } = standard;
    const missing = await post(without);
    assert.equal(missing.status, 400, `${name}: ${JSON.stringify(missing)}`);
    assert.match(missing.body.error.message, new RegExp(`missing ${name} header`));
  }
  const intents = spawnSync('sqlite3', ['-readonly', '-cmd', '.timeout 10000', db, 'SELECT count(*) FROM intents'], { encoding: 'utf8' });
  assert.equal(intents.stdout.trim(), '0', intents.stderr);  // nothing refused was decided
  // The negative control: the same request with agreeing headers is served.
  const served = await post(standard);
  assert.equal(served.status, 200, JSON.stringify(served));
  assert.equal(served.body.result.structuredContent.status, 'fresh');
});

test('serve --shared, pinned 2026-07-28 over the bridge: a cancelled fence_prepare is withdrawn (the bridge closes its connection)', async (t) => {
  const db = path.join(await tempDir(t), 'ledger.sqlite');
  const client = await stdioClient(t, { args: ['serve', '--shared', '--db', db], mode: { pin: '2026-07-28' }, name: 'canceller' });
  await sc(client, 'fence_stats', {});
  const unlock = await lockLedger(t, db);
  const cancel = new AbortController();
  const pending = client.callTool({ name: 'fence_prepare', arguments: prepareArgs('cancelled') }, { signal: cancel.signal });
  const { url, token } = JSON.parse(await readFile(`${db}.server.json`, 'utf8'));
  await inServersHands(url, token, 1);
  cancel.abort('the agent gave up');
  await assert.rejects(pending);
  await serverSawCancel(db);
  await unlock();
  const retry = await retried(() => sc(client, 'fence_prepare', prepareArgs('cancelled')));
  const log = await readFile(`${db}.server.log`, 'utf8');
  assert.equal(retry.status, 'fresh', JSON.stringify(retry));
  assert.equal(retry.prepared.generation, 2, log);
  assert.equal(withdrawals(db, 'cancelled'), 1);
});

test('wrap in front of a real 2025 server (server-filesystem): every mode is served, the edit runs once across revisions', async (t) => {
  const dir = await tempDir(t);
  const file = path.join(dir, 'notes.txt');
  await writeFile(file, 'draft END\n');
  const db = path.join(dir, 'ledger.sqlite');
  const counts = [];
  for (const { label, mode, era } of MODES) {
    const client = await stdioClient(t, { args: ['wrap', '--db', db, '--', NODE, FILESYSTEM, dir], mode, name: label });
    assert.equal(client.getNegotiatedProtocolVersion(), era, label);
    assert.equal(client.getServerVersion().name, 'secure-filesystem-server');
    counts.push((await client.listTools()).tools.length);
    const result = await client.callTool({ name: 'edit_file', arguments: { path: file, edits: [{ oldText: 'END', newText: '+END' }] } });
    assert.notEqual(result.isError, true, JSON.stringify(result));
  }
  assert.equal(new Set(counts).size, 1);  // the same mirrored list in every revision
  assert.equal(await readFile(file, 'utf8'), 'draft +END\n');  // once, not three times
});

test('wrap, pinned 2026-07-28: the child\'s sampling request cannot be relayed to a stateless agent and fails by name, nothing hangs', async (t) => {
  const dir = await tempDir(t);
  const log = path.join(dir, 'effects.jsonl');
  await writeFile(log, '');
  const client = await stdioClient(t, {
    args: ['wrap', '--db', path.join(dir, 'ledger.sqlite'), '--', NODE, EFFECT_SERVER],
    env: { EFFECT_LOG: log, EFFECT_GATES: dir },
    mode: { pin: '2026-07-28' },
    name: 'stateless-agent',
  });
  const result = await client.callTool({ name: 'ask_agent', arguments: { name: 'q' } });
  assert.match(result.content[0].text, /the agent gave no answer: .*sampling/i, JSON.stringify(result));
});

// A pinned 2026-07-28 agent with a person behind it: the child (a 2025
// server) asks for confirmation mid-call; wrap answers the call
// input_required, the client asks its person and retries with the answer,
// and the child's one call goes on and is recorded.
async function confirmingAgent(t, dir, log, decide) {
  const asked = [];
  const transport = new StdioClientTransport({
    command: BIN,
    args: ['wrap', '--db', path.join(dir, 'ledger.sqlite'), '--', NODE, EFFECT_SERVER],
    env: { ...process.env, EFFECT_LOG: log, EFFECT_GATES: dir },
    stderr: 'pipe',
  });
  let stderr = '';
  transport.stderr?.on('data', (chunk) => { stderr += chunk; });
  const client = new Client({ name: 'person-behind', version: '1.0.0' },
    { versionNegotiation: { mode: { pin: '2026-07-28' } }, capabilities: { elicitation: { form: {} } } });
  client.setRequestHandler('elicitation/create', async (request) => {
    asked.push(request.params.message);
    return decide(request);
  });
  await client.connect(transport);
  t.after(async () => {
    await client.close();
    assert.doesNotMatch(stderr, /Sanitizer|runtime error:/);
  });
  return { client, asked, stderr: () => stderr };
}

const effectEvents = async (log) =>
  (await readFile(log, 'utf8')).split('\n').filter(Boolean).map((line) => JSON.parse(line));

test('wrap, pinned 2026-07-28: a child\'s elicitation reaches the agent as input_required; one run, replayed without asking', async (t) => {
  const dir = await tempDir(t);
  const log = path.join(dir, 'effects.jsonl');
  await writeFile(log, '');
  const agent = await confirmingAgent(t, dir, log,
    () => ({ action: 'accept', content: { approver: 'ada' } }));
  const first = await agent.client.callTool({ name: 'confirm_effect', arguments: { name: 'payout-7' } });
  assert.notEqual(first.isError, true, JSON.stringify(first));
  assert.match(first.content[0].text, /did payout-7, confirmed by ada/);
  assert.equal(first._meta.effectfence.replayed, false, JSON.stringify(first));
  assert.deepEqual(agent.asked, ['confirm payout-7?']);
  const again = await agent.client.callTool({ name: 'confirm_effect', arguments: { name: 'payout-7' } });
  assert.equal(again._meta.effectfence.replayed, true, JSON.stringify(again));
  assert.equal(again._meta.effectfence.certificate, first._meta.effectfence.certificate);
  assert.deepEqual(agent.asked, ['confirm payout-7?']);  // the replay asked no one
  const runs = (await effectEvents(log)).filter((e) => e.event === 'run');
  assert.deepEqual(runs.map((e) => e.name), ['payout-7']);
  assert.match(agent.stderr(), /answered input_required/);
});

test('wrap, pinned 2026-07-28: a declined confirmation is the child\'s tool error, fenced as failed; nothing ran', async (t) => {
  const dir = await tempDir(t);
  const log = path.join(dir, 'effects.jsonl');
  await writeFile(log, '');
  const agent = await confirmingAgent(t, dir, log, () => ({ action: 'decline' }));
  const result = await agent.client.callTool({ name: 'confirm_effect', arguments: { name: 'payout-8' } });
  assert.equal(result.isError, true, JSON.stringify(result));
  assert.match(result.content[0].text, /payout-8 not confirmed: decline/);
  assert.equal(result._meta.effectfence.fenced, 'failed');
  const events = await effectEvents(log);
  assert.deepEqual(events.map((e) => e.event), ['declined']);
});

test('wrap, pinned 2026-07-28: a retry whose requestState belongs to another call is refused, and the real retry still lands', async (t) => {
  // Raw lines, to hold the rounds by hand: the SDK client always retries right.
  const dir = await tempDir(t);
  const log = path.join(dir, 'effects.jsonl');
  await writeFile(log, '');
  const child = spawn(BIN, ['wrap', '--db', path.join(dir, 'ledger.sqlite'), '--wait-secs', '0', '--', NODE, EFFECT_SERVER], {
    env: { ...process.env, EFFECT_LOG: log, EFFECT_GATES: dir }, stdio: ['pipe', 'pipe', 'pipe'],
  });
  t.after(() => child.kill('SIGKILL'));
  const replies = new Map();
  createInterface({ input: child.stdout }).on('line', (line) => {
    const message = JSON.parse(line);
    if (message.id !== undefined) replies.set(message.id, message);
  });
  const meta = { ...ENVELOPE, 'io.modelcontextprotocol/clientCapabilities': { elicitation: {} } };
  let next = 1;
  const call = async (params) => {
    const id = next++;
    child.stdin.write(`${JSON.stringify({ jsonrpc: '2.0', id, method: 'tools/call', params: { ...params, _meta: meta } })}\n`);
    await eventually(() => replies.has(id), { what: `an answer to ${id}`, timeoutMs: 30_000 });
    return replies.get(id);
  };
  const asked = await call({ name: 'confirm_effect', arguments: { name: 'p9' } });
  assert.equal(asked.result?.resultType, 'input_required', JSON.stringify(asked));
  const [key] = Object.keys(asked.result.inputRequests);
  assert.equal(asked.result.inputRequests[key].method, 'elicitation/create');
  const state = asked.result.requestState;
  // Another call's arguments with this state: refused, the parked call kept.
  const wrong = await call({ name: 'confirm_effect', arguments: { name: 'p10' }, requestState: state,
    inputResponses: { [key]: { action: 'accept', content: { approver: 'eve' } } } });
  assert.equal(wrong.error.code, -32602, JSON.stringify(wrong));
  assert.match(wrong.error.message, /requestState does not fit this call/);
  // The call itself meanwhile: still running, so refused in_flight (with
  // --wait-secs 0; by default it would wait for the outcome), not run.
  const twin = await call({ name: 'confirm_effect', arguments: { name: 'p9' } });
  assert.equal(twin.result._meta.effectfence.refused, 'in_flight', JSON.stringify(twin));
  const done = await call({ name: 'confirm_effect', arguments: { name: 'p9' }, requestState: state,
    inputResponses: { [key]: { action: 'accept', content: { approver: 'bob' } } } });
  assert.equal(done.result?.resultType, "complete", JSON.stringify(done));
  assert.match(done.result.content[0].text, /did p9, confirmed by bob/);
  const runs = (await effectEvents(log)).filter((e) => e.event === 'run');
  assert.deepEqual(runs.map((e) => e.name), ['p9']);
});

// wrap in front of a server that speaks only 2026-07-28 (the official v2
// SDK's serveStdio, legacy: 'reject'): it refuses initialize, so wrap asks
// server/discover and speaks to it statelessly, whatever its agent speaks.
const MODERN_SERVER = path.join(path.dirname(EFFECT_SERVER), 'modern_server.mjs');

async function modernWrap(t, { dir, log, mode, name, decide }) {
  const transport = new StdioClientTransport({
    command: BIN,
    args: ['wrap', '--db', path.join(dir, 'ledger.sqlite'), '--', NODE, MODERN_SERVER],
    env: { ...process.env, EFFECT_LOG: log },
    stderr: 'pipe',
  });
  let stderr = '';
  transport.stderr?.on('data', (chunk) => { stderr += chunk; });
  const asked = [];
  const client = new Client({ name, version: '1.0.0' },
    { versionNegotiation: { mode }, capabilities: decide ? { elicitation: { form: {} } } : {} });
  if (decide) {
    client.setRequestHandler('elicitation/create', async (request) => {
      asked.push(request.params.message);
      return decide(request);
    });
  }
  await client.connect(transport);
  t.after(async () => {
    await client.close();
    assert.doesNotMatch(stderr, /Sanitizer|runtime error:/);
  });
  return { client, asked, stderr: () => stderr };
}

test('wrap in front of a server that speaks only 2026-07-28: every mode is served, the effect runs once', async (t) => {
  const dir = await tempDir(t);
  const log = path.join(dir, 'effects.jsonl');
  await writeFile(log, '');
  const notes = [];
  for (const { label, mode } of MODES) {
    const { client, stderr } = await modernWrap(t, { dir, log, mode, name: label });
    const { tools } = await client.listTools();
    assert.deepEqual(tools.map((tool) => tool.name).sort(), ['confirm_effect', 'effect'], label);
    const result = await client.callTool({ name: 'effect', arguments: { name: 'scale-up', amount: 3 } });
    assert.notEqual(result.isError, true, `${label}: ${JSON.stringify(result)}`);
    assert.match(result.content[0].text, /did scale-up/, label);
    notes.push(result._meta.effectfence);
    assert.match(stderr(), /speaks only 2026-07-28: it is spoken to statelessly/, label);
  }
  assert.deepEqual(notes.map((n) => n.replayed), [false, true, true]);
  assert.equal(new Set(notes.map((n) => n.certificate)).size, 1);
  const runs = (await effectEvents(log)).filter((e) => e.event === 'run');
  assert.equal(runs.length, 1, JSON.stringify(runs));
});

test('wrap in front of a 2026-07-28-only server: its input_required reaches a 2025 agent as elicitation and a 2026 agent as input_required', async (t) => {
  const dir = await tempDir(t);
  const log = path.join(dir, 'effects.jsonl');
  await writeFile(log, '');
  const accept = () => ({ action: 'accept', content: { approver: 'grace' } });
  const legacy = await modernWrap(t, { dir, log, mode: 'legacy', name: 'legacy-person', decide: accept });
  const first = await legacy.client.callTool({ name: 'confirm_effect', arguments: { name: 'p1' } });
  assert.match(first.content[0].text, /did p1, confirmed by grace/, JSON.stringify(first));
  assert.equal(first._meta.effectfence.replayed, false);
  assert.deepEqual(legacy.asked, ['confirm p1?']);

  const pinned = await modernWrap(t, { dir, log, mode: { pin: '2026-07-28' }, name: 'modern-person', decide: accept });
  const second = await pinned.client.callTool({ name: 'confirm_effect', arguments: { name: 'p2' } });
  assert.match(second.content[0].text, /did p2, confirmed by grace/, JSON.stringify(second));
  assert.equal(second._meta.effectfence.replayed, false);
  assert.deepEqual(pinned.asked, ['confirm p2?']);
  // Replays ask no one and run nothing.
  const again = await pinned.client.callTool({ name: 'confirm_effect', arguments: { name: 'p1' } });
  assert.equal(again._meta.effectfence.replayed, true);
  assert.deepEqual(pinned.asked, ['confirm p2?']);
  const runs = (await effectEvents(log)).filter((e) => e.event === 'run');
  assert.deepEqual(runs.map((e) => e.name), ['p1', 'p2']);
});

describe('MCP 2026-07-28 beside the 2025 revisions', { concurrency: true }, () => {
  for (const [name, fn] of tests) serial(name, fn);
});
