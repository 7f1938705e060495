// What a client reads through `effectfence wrap` is what it reads from the
// server itself, byte for byte, but for the differences docs/WRAP.md lists
// ("What differs"). A raw JSON-RPC peer sends identical requests to a server
// and to `effectfence wrap -- the same server` and compares the lines that
// come back (raw_rpc.mjs): a real npm server (server-filesystem) and a
// fixture that writes its lines by hand (fixtures/mirror_server.mjs: keys
// in no sorted order, 2.50 and 1E2, a notification without params).
import assert from 'node:assert/strict';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { test } from 'node:test';

import { BIN } from './helpers.mjs';
import { RawPeer, assertSameLine } from './raw_rpc.mjs';
import { FILESYSTEM, NODE } from './wrap_helpers.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const MIRROR_SERVER = path.join(here, 'fixtures/mirror_server.mjs');

async function tempDir(t) {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'effectfence-mirror-'));
  t.after(() => rm(dir, { recursive: true, force: true }));
  return dir;
}

// The server straight and through wrap, both past the handshake.
async function pair(t, child, { env = {}, wrapArgs = [] } = {}) {
  const dir = await tempDir(t);
  const straight = new RawPeer(child[0], child.slice(1), env);
  const wrapped = new RawPeer(BIN, ['wrap', '--db', path.join(dir, 'ledger.sqlite'), ...wrapArgs, '--', ...child], env);
  t.after(() => Promise.all([straight.close(), wrapped.close()]));
  await Promise.all([straight.initialize(), wrapped.initialize()]);
  return { straight, wrapped, dir };
}

// The notification lines a peer wrote between two of its lines.
function notificationsBetween(peer, from, to) {
  return peer.lines.slice(from, to).filter((line) => {
    const message = JSON.parse(line);
    return message.id === undefined && typeof message.method === 'string';
  });
}

test('the comparison catches a reordered key, a respelt number, an added params and an extra _meta key', () => {
  const line = '{"result":{"tools":[{"name":"a","inputSchema":{"type":"object"},"x":2.50}]},"jsonrpc":"2.0","id":1}';
  // The envelope is wrap's own to order: that alone passes.
  assertSameLine(line, '{"id":1,"jsonrpc":"2.0","result":{"tools":[{"name":"a","inputSchema":{"type":"object"},"x":2.50}]}}');
  assert.throws(() => assertSameLine(line,
    '{"id":1,"jsonrpc":"2.0","result":{"tools":[{"inputSchema":{"type":"object"},"name":"a","x":2.50}]}}'), /differ/);
  assert.throws(() => assertSameLine(line,
    '{"id":1,"jsonrpc":"2.0","result":{"tools":[{"name":"a","inputSchema":{"type":"object"},"x":2.5}]}}'), /differ/);
  const note = '{"jsonrpc":"2.0","method":"notifications/resources/list_changed"}';
  assert.throws(() => assertSameLine(note, '{"jsonrpc":"2.0","method":"notifications/resources/list_changed","params":{}}'),
    /differ/);
  // Only _meta.effectfence is mapped away, and _meta only when wrap added it.
  const result = '{"id":2,"jsonrpc":"2.0","result":{"content":[],"_meta":{"origin":"x"}}}';
  assertSameLine(result, '{"id":2,"jsonrpc":"2.0","result":{"content":[],"_meta":{"origin":"x","effectfence":{"replayed":false}}}}',
    { fenceNote: true });
  assert.throws(() => assertSameLine(result,
    '{"id":2,"jsonrpc":"2.0","result":{"content":[],"_meta":{"origin":"x","extra":1,"effectfence":{}}}}',
    { fenceNote: true }), /differ/);
  assertSameLine('{"id":3,"jsonrpc":"2.0","result":{"content":[]}}',
    '{"id":3,"jsonrpc":"2.0","result":{"content":[],"_meta":{"effectfence":{"replayed":false}}}}', { fenceNote: true });
  assert.throws(() => assertSameLine('{"id":3,"jsonrpc":"2.0","result":{"content":[]}}',
    '{"id":3,"jsonrpc":"2.0","result":{"content":[]}}', { fenceNote: true, mustHaveNote: true }), /no _meta.effectfence/);
});

test('through wrap, the hand-written fixture\'s tools, resources, prompts, results and notifications are its bytes',
  async (t) => {
    const { straight, wrapped } = await pair(t, [NODE, MIRROR_SERVER]);
    for (const [id, method] of [[1, 'tools/list'], [2, 'resources/list'], [3, 'resources/templates/list'],
      [4, 'prompts/list']]) {
      const [a, b] = await Promise.all([straight.request(id, method), wrapped.request(id, method)]);
      assertSameLine(a, b);
    }
    // The fixture's entries are not in key order: a sorting relay would fail above.
    const keys = Object.keys(JSON.parse(await straight.request(5, 'tools/list')).result.tools[0]);
    assert.notDeepEqual(keys, [...keys].sort());

    // A fenced call with progress: the result with _meta.effectfence added,
    // the logging message, the change without params, the progress under
    // the agent's token, each as the fixture wrote it.
    const params = '{"name":"stamp","arguments":{"zeta":"z","alpha":1.50},"_meta":{"progressToken":"tok-1","trace":"t"}}';
    const fromA = straight.lines.length;
    const fromB = wrapped.lines.length;
    const [a, b] = await Promise.all([straight.request(6, 'tools/call', params), wrapped.request(6, 'tools/call', params)]);
    assertSameLine(a, b, { fenceNote: true, mustHaveNote: true });
    const notesA = notificationsBetween(straight, fromA, straight.lines.indexOf(a));
    const notesB = notificationsBetween(wrapped, fromB, wrapped.lines.indexOf(b));
    assert.equal(notesA.length, 3, notesA.join('\n'));
    assert.equal(notesB.length, notesA.length, notesB.join('\n'));
    notesA.forEach((line, i) => assertSameLine(line, notesB[i]));

    // Passed through (readOnlyHint): the result exactly, no note.
    const [c, d] = await Promise.all([straight.request(7, 'tools/call', '{"name":"peek"}'),
      wrapped.request(7, 'tools/call', '{"name":"peek"}')]);
    assertSameLine(c, d);
    // An identical call replays the recorded result: the same content, from the ledger.
    const replay = JSON.parse(await wrapped.request(8, 'tools/call', params));
    assert.equal(replay.result._meta.effectfence.replayed, true);
    assert.deepEqual(replay.result.structuredContent, JSON.parse(a).result.structuredContent);
  });

test('through wrap, the child hears the agent\'s params as written, its progress token replaced in place', async (t) => {
  const dir = await tempDir(t);
  const log = path.join(dir, 'runs.jsonl');
  const wrapped = new RawPeer(BIN, ['wrap', '--db', path.join(dir, 'ledger.sqlite'), '--', NODE, MIRROR_SERVER],
    { MIRROR_LOG: log });
  t.after(() => wrapped.close());
  await wrapped.initialize();
  // The fixture logs params re-stringified (JSON.stringify keeps the order
  // it parsed): the key order the agent wrote reaches it.
  const params = '{"arguments":{"zeta":"q","alpha":2},"name":"stamp","_meta":{"trace":"t","progressToken":7}}';
  await wrapped.request(1, 'tools/call', params);
  const heard = (await readFile(log, 'utf8')).trim().split('\n').map((line) => JSON.parse(line));
  assert.equal(heard.length, 1);
  assert.deepEqual(Object.keys(heard[0]), ['arguments', 'name', '_meta']);
  assert.deepEqual(Object.keys(heard[0].arguments), ['zeta', 'alpha']);
  assert.deepEqual(Object.keys(heard[0]._meta), ['trace', 'progressToken']);
  assert.notEqual(heard[0]._meta.progressToken, 7, 'wrap speaks to the child with a token of its own');
});

test('through wrap, server-filesystem\'s tool list and results are its bytes, fenced or passed through',
  async (t) => {
    const root = await tempDir(t);
    await writeFile(path.join(root, 'note.txt'), 'hello, mirror\n');
    for (const wrapArgs of [[], ['--fence-all']]) {
      const { straight, wrapped } = await pair(t, [NODE, FILESYSTEM, root], { wrapArgs });
      const [a, b] = await Promise.all([straight.request(1, 'tools/list'), wrapped.request(1, 'tools/list')]);
      assertSameLine(a, b);
      const read = `{"name":"read_text_file","arguments":{"path":${JSON.stringify(path.join(root, 'note.txt'))}}}`;
      const list = '{"name":"list_allowed_directories","arguments":{}}';
      for (const [id, params] of [[2, read], [3, list]]) {
        const [x, y] = await Promise.all([straight.request(id, 'tools/call', params), wrapped.request(id, 'tools/call', params)]);
        assert.ok(!JSON.parse(x).result.isError, x);
        const fenced = wrapArgs.length > 0;
        assertSameLine(x, y, { fenceNote: fenced, mustHaveNote: fenced });
      }
    }
  });
