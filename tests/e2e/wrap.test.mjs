// effectfence wrap in front of real MCP servers from npm, driven by the
// official SDK client: duplicates that double-fire straight to the server
// run once through wrap.
import assert from 'node:assert/strict';
import { readFile, realpath, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { test } from 'node:test';
import { pathToFileURL } from 'node:url';

import { ListRootsRequestSchema } from '@modelcontextprotocol/sdk/types.js';

import { eventually, tempDir } from './helpers.mjs';
import {
  FILESYSTEM, NODE, TASKMANAGER, allTools, connectDirect, connectWrapped, effectfenceJson, planningArgs,
  requestsIn, textOf,
} from './wrap_helpers.mjs';

async function taskManager(t) {
  const dir = await tempDir(t);
  const taskFile = path.join(dir, 'tasks.json');
  return { dir, taskFile, db: path.join(dir, 'ledger.sqlite'), child: [NODE, TASKMANAGER], env: { TASK_MANAGER_FILE_PATH: taskFile } };
}

test('request_planning twice: straight to the server two requests, through wrap one', async (t) => {
  const direct = await taskManager(t);
  const straight = await connectDirect(t, direct);
  await straight.client.callTool({ name: 'request_planning', arguments: planningArgs() });
  await straight.client.callTool({ name: 'request_planning', arguments: planningArgs() });
  assert.equal(requestsIn(direct.taskFile).length, 2, 'the server double-fires on its own');

  const fenced = await taskManager(t);
  const wrapped = await connectWrapped(t, fenced);
  const first = await wrapped.client.callTool({ name: 'request_planning', arguments: planningArgs() });
  const second = await wrapped.client.callTool({ name: 'request_planning', arguments: planningArgs() });
  assert.equal(requestsIn(fenced.taskFile).length, 1);
  assert.notEqual(first.isError, true);
  assert.deepEqual(second.content, first.content, 'the replay is the recorded result');
  assert.equal(second._meta.effectfence.replayed, true);
  assert.equal(second._meta.effectfence.certificate, first._meta.effectfence.certificate);
  assert.match(textOf(first), /req-1/);

  // A different call is a different action and runs.
  await wrapped.client.callTool({ name: 'request_planning', arguments: planningArgs('another request') });
  assert.equal(requestsIn(fenced.taskFile).length, 2);

  await wrapped.close();
  const stats = await effectfenceJson('stats', '--db', fenced.db, '--json');
  assert.equal(stats.ledger.admitted, 2);
  assert.equal(stats.ledger.replayed, 1);
  assert.equal(stats.ledger.committed, 2);
});

test('20 concurrent identical calls through wrap: the server runs once, the rest are refused', async (t) => {
  const setup = await taskManager(t);
  const wrapped = await connectWrapped(t, { ...setup, wrapArgs: ['--wait-secs', '0'] });  // refused, not waiting
  const results = await Promise.all(Array.from({ length: 20 }, () =>
    wrapped.client.callTool({ name: 'request_planning', arguments: planningArgs() })));
  assert.equal(requestsIn(setup.taskFile).length, 1);
  const ran = results.filter((r) => r._meta?.effectfence?.replayed === false);
  const refused = results.filter((r) => r.isError === true);
  const replayed = results.filter((r) => r._meta?.effectfence?.replayed === true);
  assert.equal(ran.length, 1);
  assert.equal(ran.length + refused.length + replayed.length, 20);
  for (const r of refused) {
    assert.match(textOf(r), /identical call to request_planning is running/);
    assert.equal(r._meta.effectfence.refused, 'in_flight');
  }
  // Once it is done, an identical call gets its result.
  const later = await wrapped.client.callTool({ name: 'request_planning', arguments: planningArgs() });
  assert.equal(later._meta.effectfence.replayed, true);
  assert.deepEqual(later.content, ran[0].content);
});

test('the mirrored tool list equals the server\'s, field for field', async (t) => {
  for (const [label, child, env] of [
    ['task manager', [NODE, TASKMANAGER], {}],
    ['filesystem', [NODE, FILESYSTEM, await tempDir(t)], {}],
  ]) {
    const dir = await tempDir(t);
    const setup = { db: path.join(dir, 'ledger.sqlite'), child, env: { TASK_MANAGER_FILE_PATH: path.join(dir, 't.json'), ...env } };
    const straight = await connectDirect(t, setup);
    const wrapped = await connectWrapped(t, setup);
    const expected = await allTools(straight.client);
    assert.ok(expected.length > 3, `${label}: the server lists its tools`);
    assert.deepEqual(await allTools(wrapped.client), expected, label);
    assert.deepEqual(wrapped.client.getServerVersion(), straight.client.getServerVersion());
  }
});

test('filesystem edit_file END -> +END twice: straight twice applied, through wrap once', async (t) => {
  for (const [label, connect, expected] of [['straight', connectDirect, '++END\n'], ['wrapped', connectWrapped, '+END\n']]) {
    const dir = await tempDir(t);
    const file = path.join(dir, 'notes.txt');
    await writeFile(file, 'END\n');
    const session = await connect(t, { db: path.join(dir, 'ledger.sqlite'), child: [NODE, FILESYSTEM, dir] });
    const edit = { path: file, edits: [{ oldText: 'END', newText: '+END' }] };
    const first = await session.client.callTool({ name: 'edit_file', arguments: edit });
    assert.notEqual(first.isError, true, `${label}: ${textOf(first)}`);
    await session.client.callTool({ name: 'edit_file', arguments: edit });
    assert.equal(await readFile(file, 'utf8'), expected, label);
  }
});

test('two wrap processes on one ledger: the second replays the first\'s result', async (t) => {
  const setup = await taskManager(t);
  const alice = await connectWrapped(t, { ...setup, name: 'alice' });
  const bob = await connectWrapped(t, { ...setup, name: 'bob' });
  const first = await alice.client.callTool({ name: 'request_planning', arguments: planningArgs() });
  const second = await bob.client.callTool({ name: 'request_planning', arguments: planningArgs() });
  assert.equal(requestsIn(setup.taskFile).length, 1);
  assert.equal(second._meta.effectfence.replayed, true);
  assert.deepEqual(second.content, first.content);
});

test('filesystem roots: through wrap the server serves the agent\'s roots, and follows a change', async (t) => {
  const [dirA, dirB, dirC] = await Promise.all([tempDir(t), tempDir(t), tempDir(t)].map(async (d) => realpath(await d)));
  const db = path.join(await tempDir(t), 'ledger.sqlite');
  const allowed = async (session) => {
    const listed = await session.client.callTool({ name: 'list_allowed_directories', arguments: {} });
    return textOf(listed).split('\n').slice(1);
  };

  let roots = [dirB];
  const withRoots = await connectWrapped(t, {
    db,
    child: [NODE, FILESYSTEM, dirA],
    capabilities: { roots: { listChanged: true } },
    prepare: (client) => client.setRequestHandler(ListRootsRequestSchema, async () => ({
      roots: roots.map((dir) => ({ uri: pathToFileURL(dir).href, name: path.basename(dir) })),
    })),
  });
  // The server asks for the roots once initialized; its answer comes back through wrap.
  await eventually(async () => (await allowed(withRoots)).join() === dirB, { what: 'the server to serve root B' });

  const withoutRoots = await connectWrapped(t, { db, child: [NODE, FILESYSTEM, dirA] });
  assert.deepEqual(await allowed(withoutRoots), [dirA], 'a client without roots keeps the server\'s own directory');

  roots = [dirC];
  await withRoots.client.sendRootsListChanged();
  await eventually(async () => (await allowed(withRoots)).join() === dirC, { what: 'the server to follow the change to C' });
});
