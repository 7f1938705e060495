// Shared pieces of the end-to-end tests: the official MCP SDK client talking
// to the real `effectfence serve` binary over stdio, on real ledger files.
import { execFileSync, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';

const here = path.dirname(fileURLToPath(import.meta.url));
export const BIN = process.env.EFFECTFENCE_BIN ?? path.resolve(here, '../../build/effectfence');

// A fresh directory for one test's ledger, removed when the test ends.
export async function tempDir(t) {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'effectfence-e2e-'));
  t.after(() => rm(dir, { recursive: true, force: true }));
  return dir;
}

// The ledger one test runs on: a new SQLite file, or, when
// EFFECTFENCE_TEST_LEDGER names a PostgreSQL database (CTest runs these
// suites a second time that way), a new schema in it, dropped afterwards.
export async function freshLedger(t, name = 'ledger.sqlite') {
  const server = process.env.EFFECTFENCE_TEST_LEDGER ?? '';
  if (!/^postgres(ql)?:/.test(server)) return path.join(await tempDir(t), name);
  const schema = `e2e_${randomBytes(8).toString('hex')}`;
  const psql = (sql) => execFileSync('psql', ['-X', '-q', '-v', 'ON_ERROR_STOP=1', server, '-c', sql]);
  psql(`CREATE SCHEMA ${schema}`);
  t.after(() => psql(`DROP SCHEMA ${schema} CASCADE`));
  return `${server}${server.includes('?') ? '&' : '?'}options=-csearch_path%3D${schema}`;
}

// Starts a stdio MCP server and connects an SDK client to it; the server's
// stderr is kept for messages. The session closes when the test ends.
// capabilities: the client's (roots, sampling, ...); prepare(client) runs
// before the connection, to set the handlers for the server's requests.
export async function openSession(t, { command, args, env = {}, name = 'e2e', capabilities = {}, prepare }) {
  const transport = new StdioClientTransport({ command, args, env: { ...process.env, ...env }, stderr: 'pipe' });
  let stderr = '';
  transport.stderr.on('data', (chunk) => { stderr += chunk; });
  const client = new Client({ name, version: '1.0.0' }, { capabilities });
  prepare?.(client);
  await client.connect(transport);
  const session = {
    client,
    transport,
    pid: transport.pid,
    stderr: () => stderr,
    closed: false,
    async close() {
      if (session.closed) return;
      session.closed = true;
      await client.close();
    },
  };
  t.after(() => session.close());
  return session;
}

// Starts `effectfence serve --db <db>` and connects an SDK client to it. The
// tool list is fetched so that the client validates every structuredContent
// against its tool's outputSchema, as real hosts do.
export async function connect(t, db, name = 'e2e') {
  const session = await openSession(t, { command: BIN, args: ['serve', '--db', db, '--log-level', 'debug'], name });
  session.tools = (await session.client.listTools()).tools;
  return session;
}

// Calls a tool; returns {isError, sc: structuredContent}. The SDK has already
// checked structuredContent against the outputSchema (it throws otherwise).
export async function call(session, name, args) {
  const result = await session.client.callTool({ name, arguments: args });
  const text = result.content?.[0]?.text;
  if (JSON.stringify(JSON.parse(text)) !== JSON.stringify(result.structuredContent)) {
    throw new Error(`${name}: text content differs from structuredContent`);
  }
  return { isError: result.isError === true, sc: result.structuredContent };
}

export function prepareArgs(intent, overrides = {}) {
  return {
    intent,
    domain: `order:${intent}`,
    tool: 'charge',
    args: { order: intent, amount_cents: 4900 },
    agent: 'agent-a',
    ...overrides,
  };
}

// True iff a process with this pid exists.
export function isAlive(pid) {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

// Polls check() until it returns a truthy value or the deadline passes.
export async function eventually(check, { timeoutMs = 15000, intervalMs = 100, what = 'condition' } = {}) {
  const deadline = Date.now() + timeoutMs;
  let last;
  while (Date.now() < deadline) {
    last = await check();
    if (last) return last;
    await new Promise((resolve) => setTimeout(resolve, intervalMs));
  }
  throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
}

// Takes the ledger's write lock in a sqlite3 process and resolves once it is
// held (a fixed sleep is not enough on a loaded machine: sqlite3 may not have
// started yet). Resolves to unlock(), which commits and waits for the exit.
export async function lockLedger(t, db) {
  // -bail: a BEGIN that fails (still locked after the timeout) ends sqlite3
  // before it prints 'locked'.
  const locker = spawn('sqlite3', ['-bail', db], { stdio: ['pipe', 'pipe', 'inherit'] });
  t.after(() => locker.kill('SIGKILL'));
  const exited = new Promise((resolve) => locker.on('exit', resolve));
  let out = '';
  const held = new Promise((resolve, reject) => {
    locker.stdout.on('data', (chunk) => {
      out += chunk;
      if (out.includes('locked')) resolve();
    });
    exited.then(() => reject(new Error(`sqlite3 exited before it held the lock of ${db}`)));
  });
  // The busy timeout covers the server's own short writes.
  locker.stdin.write(".timeout 10000\nBEGIN IMMEDIATE;\nSELECT 'locked';\n");
  await held;
  return async () => {
    locker.stdin.end('COMMIT;\n');
    await exited;
  };
}

// One raw HTTP exchange, so tests can send the headers a browser would.
export function httpRequest(url, { method = 'POST', headers = {}, body } = {}) {
  return new Promise((resolve, reject) => {
    const req = http.request(url, { method, headers }, (res) => {
      let text = '';
      res.on('data', (chunk) => { text += chunk; });
      res.on('end', () => resolve({ status: res.statusCode, headers: res.headers, body: text }));
    });
    req.on('error', reject);
    if (body !== undefined) req.write(body);
    req.end();
  });
}
