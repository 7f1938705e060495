// serve --shared: one fence server per ledger behind a lease file, reached by
// stdio bridges and by Streamable HTTP clients. Real processes, pipes and
// sockets: the official SDK client on both transports.
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { readlinkSync } from 'node:fs';
import { chmod, copyFile, mkdir, readFile, stat, writeFile } from 'node:fs/promises';
import net from 'node:net';
import os from 'node:os';
import readline from 'node:readline';
import { fileURLToPath } from 'node:url';
import path from 'node:path';
import { test } from 'node:test';

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';

import { BIN, call, eventually, httpRequest as request, isAlive, lockLedger, openSession, prepareArgs, tempDir } from './helpers.mjs';

const HERE = path.dirname(fileURLToPath(import.meta.url));

// Short timings so a server leaves soon after its last bridge.
const FAST = {
  EFFECTFENCE_SHARED_IDLE_MS: '300',
  EFFECTFENCE_SHARED_BIND_DEADLINE_MS: '1500',
  EFFECTFENCE_SHARED_ELECTION_MS: '10000',
};


async function exists(file) {
  try {
    await stat(file);
    return true;
  } catch {
    return false;
  }
}

async function ledgerIn(t) {
  const dir = await tempDir(t);
  return { dir, db: path.join(dir, 'ledger.sqlite'), lease: path.join(dir, 'ledger.sqlite.server.json') };
}

// `effectfence serve --shared` with an SDK client on its stdio.
async function shared(t, db, { name = 'e2e', extraArgs = [], env = {}, prefix = [], bin = BIN } = {}) {
  const args = ['serve', '--shared', '--db', db, '--log-level', 'debug', ...extraArgs];
  const session = await openSession(t, {
    command: prefix.length ? prefix[0] : bin,
    args: prefix.length ? [...prefix.slice(1), bin, ...args] : args,
    env: { ...FAST, ...env },
    name,
  });
  // Under tools/test the binary carries AddressSanitizer and UBSan: their reports must not appear.
  t.after(async () => {
    await session.close();
    assert.doesNotMatch(session.stderr(), /Sanitizer|runtime error:/);
  });
  return session;
}

// The log line may reach us after the answer that followed it: stdout and stderr are separate pipes.
async function logged(session, pattern) {
  return eventually(() => session.stderr().match(pattern), { what: `the log to match ${pattern}:\n${session.stderr()}`, timeoutMs: 5000 });
}

// Permission bits stop nobody but root: as root, tests that need an
// unwritable directory run effectfence as nobody, with the ledger where
// nobody may write, from a copy of the binary nobody can reach (the build
// may live under /root).
async function unprivileged(dir) {
  if (process.getuid() !== 0) return { prefix: [], bin: BIN };
  await chmod(dir, 0o777);
  const bin = path.join(dir, 'effectfence');
  await copyFile(BIN, bin);
  await chmod(bin, 0o755);
  return { prefix: ['setpriv', '--reuid=65534', '--regid=65534', '--clear-groups'], bin };
}

// The port of a /proc/net/tcp address (hex "IP:PORT").
const portOf = (address) => parseInt(address.split(':')[1], 16);

// The sockets of /proc/net/tcp with a local TCP port at either end, each as
// its fields: [slot, local, remote, state, tx_queue:rx_queue, ...].
async function socketsOfPort(port) {
  const table = await readFile('/proc/net/tcp', 'utf8');
  return table.split('\n').slice(1)
    .map((line) => line.trim().split(/\s+/))
    .filter((fields) => fields.length >= 5 && (portOf(fields[1]) === port || portOf(fields[2]) === port));
}

// Bytes sent to a local TCP port and not yet read by its process (the
// receive queues of its established connections).
async function unreadBytesAt(port) {
  let unread = 0;
  for (const fields of await socketsOfPort(port)) {
    if (fields[3] !== '01' || portOf(fields[1]) !== port) continue;  // ESTABLISHED, the server's end
    unread += parseInt(fields[4].split(':')[1], 16);
  }
  return unread;
}

async function readLease(file) {
  return JSON.parse(await readFile(file, 'utf8'));
}

async function leaseGone(file) {
  try {
    await eventually(async () => !(await exists(file)), { what: `${file} to be removed`, timeoutMs: 10000 });
  } catch (error) {
    // What the lease and the servers' log say is what a reader of the failure needs.
    const lease = await readFile(file, 'utf8').catch((e) => `(unreadable: ${e.message})`);
    const log = await readFile(file.replace(/\.json$/, '.log'), 'utf8').catch((e) => `(unreadable: ${e.message})`);
    error.message += `\nlease: ${lease}\nservers' log:\n${log}`;
    throw error;
  }
}

// A process driven line by line on its stdio; ask() writes a line and reads
// the next one as JSON.
function lineProcess(t, command, args) {
  const child = spawn(command, args, { env: { ...process.env, ...FAST }, stdio: ['pipe', 'pipe', 'pipe'] });
  let stderr = '';
  child.stderr.on('data', (chunk) => { stderr += chunk; });
  const answers = readline.createInterface({ input: child.stdout })[Symbol.asyncIterator]();
  const next = async () => {
    const { value, done } = await answers.next();
    if (done) throw new Error(`process ${child.pid} (${path.basename(command)}) ended early:\n${stderr}`);
    return value;
  };
  const exited = new Promise((resolve) => child.on('exit', resolve));
  t.after(() => { if (child.exitCode === null) child.kill('SIGKILL'); });
  return {
    pid: child.pid,
    stderr: () => stderr,
    next,
    write(line) {
      child.stdin.write(line + '\n');
    },
    async ask(line) {
      child.stdin.write(line + '\n');
      return JSON.parse(await next());
    },
    async close() {
      child.stdin.end();
      return exited;
    },
  };
}

// A client process (fixtures/shared_client.mjs) driven line by line.
function clientProcess(t, db) {
  return lineProcess(t, process.execPath, [path.join(HERE, 'fixtures', 'shared_client.mjs'), BIN, db]);
}

// The log written since the newest server started.
async function newestServerLog(db) {
  const log = await readFile(db + '.server.log', 'utf8');
  return log.slice(log.lastIndexOf('serving sqlite:'));
}

// The newest server has the client's notifications/initialized. Stopping it
// before that makes the bridge start another server just to deliver it.
async function sessionSettled(db) {
  await eventually(async () => /client initialized/.test(await newestServerLog(db)),
    { what: 'the shared server to receive notifications/initialized' });
}

// The servers' log (beside the lease) holds no sanitizer report.
async function cleanServerLog(db) {
  assert.doesNotMatch(await readFile(db + '.server.log', 'utf8'), /Sanitizer|runtime error:/);
}

function bootId() {
  return spawnSync('cat', ['/proc/sys/kernel/random/boot_id']).stdout.toString().trim();
}

// How effectfence names this host for liveness: its name, plus the PID
// namespace outside the initial one (whose inode is fixed).
function holderHost() {
  const inode = readlinkSync('/proc/self/ns/pid').replace(/^pid:\[(\d+)\]$/, '$1');
  return inode === '4026531836' ? os.hostname() : `${os.hostname()}/pidns:${inode}`;
}

function plantedLease({ pid, url = '', createdAt = Date.now(), ledger = 'planted' }) {
  return JSON.stringify({
    format: 'effectfence-shared-server/1',
    pid,
    started: 0,
    host: holderHost(),
    boot: bootId(),
    url,
    token: 'planted',
    created_at_ms: createdAt,
    ledger,
    lease_ttl_ms: 60000,  // a server's defaults, which the clients here ask for too
    result_ttl_ms: 86400000,
  });
}


const INITIALIZE = JSON.stringify({
  jsonrpc: '2.0', id: 1, method: 'initialize',
  params: { protocolVersion: '2025-11-25', capabilities: {}, clientInfo: { name: 'raw', version: '1' } },
});

async function expectFresh(session, intent) {
  const { sc } = await call(session, 'fence_prepare', prepareArgs(intent));
  assert.equal(sc.status, 'fresh', JSON.stringify(sc));
  return sc;
}

test('no lease: the first client starts the shared server, the next joins it live; one fence for both; the lease goes after the last leaves', async (t) => {
  const { db, lease } = await ledgerIn(t);
  const first = await shared(t, db, { name: 'first' });
  await logged(first, /: missing \(no lease file\): starting the shared server/);
  const held = await readLease(lease);
  assert.equal((await stat(lease)).mode & 0o777, 0o600);
  assert.match(held.url, /^http:\/\/127\.0\.0\.1:\d+\/mcp$/);
  assert.match(held.token, /^[0-9a-f]{64}$/);
  assert.ok(isAlive(held.pid));

  const second = await shared(t, db, { name: 'second' });
  await logged(second, new RegExp(`: live \\(pid ${held.pid} at `));
  await expectFresh(first, 'shared:a');
  await expectFresh(second, 'shared:b');
  // Both bridges reach the same process: its counters saw both admissions.
  const { sc } = await call(second, 'fence_stats', {});
  assert.equal(sc.process.admitted, 2);

  await first.close();
  await expectFresh(second, 'shared:c');  // the server outlives the client that started it
  await second.close();
  await leaseGone(lease);
  await eventually(() => !isAlive(held.pid), { what: 'the shared server to exit' });
  await cleanServerLog(db);
});

const PLANTED = {
  stale: async (t) => {
    const gone = spawnSync('true').pid;  // exited: its pid names no live process
    return plantedLease({ pid: gone, url: 'http://127.0.0.1:9/mcp' });
  },
  corrupt: async () => 'this is not a lease {',
  empty: async () => '',
  abandoned: async (t) => {
    const owner = spawn('sleep', ['30']);
    t.after(() => owner.kill('SIGKILL'));
    return plantedLease({ pid: owner.pid, createdAt: Date.now() - 60000 });
  },
};

for (const [kind, plant] of Object.entries(PLANTED)) {
  test(`${/^[aeiou]/.test(kind) ? 'an' : 'a'} ${kind} lease is taken over: the session works, the log names the case, a clean stop removes the lease`, async (t) => {
    const { db, lease } = await ledgerIn(t);
    await writeFile(lease, await plant(t), { mode: 0o600 });
    const session = await shared(t, db, { name: kind });
    await logged(session, new RegExp(`lease ${lease}: ${kind} \\(.*\\): taking over`));
    await expectFresh(session, `${kind}:1`);
    const taken = await readLease(lease);
    assert.notEqual(taken.token, 'planted');
    await session.close();
    await leaseGone(lease);
  });
}

test('a live owner that does not answer is never taken over: the client is served alone by the deadline', async (t) => {
  const { db, lease } = await ledgerIn(t);
  const owner = spawn('sleep', ['30']);
  t.after(() => owner.kill('SIGKILL'));
  await writeFile(lease, plantedLease({ pid: owner.pid, url: 'http://127.0.0.1:9/mcp', ledger: db }), { mode: 0o600 });
  const session = await shared(t, db, { name: 'unanswered', env: { EFFECTFENCE_SHARED_ELECTION_MS: '800' } });
  await logged(session, /cannot use the shared server: no shared server became usable within 800 ms: .*does not answer.*; serving this client alone/);
  await expectFresh(session, 'alone:1');
  assert.equal(JSON.parse(await readFile(lease, 'utf8')).token, 'planted');  // a live process's lease is left alone
});

test('one --lease given to clients of two ledgers: the second ledger\'s client is served alone, in its own ledger, and told why', async (t) => {
  const { dir, db, lease } = await ledgerIn(t);
  const first = await shared(t, db, { name: 'ledger-a' });
  await expectFresh(first, 'charge:one');
  const other = path.join(dir, 'other.sqlite');
  const second = await shared(t, other, { name: 'ledger-b', extraArgs: ['--lease', lease] });
  await logged(second, /cannot use the shared server: the lease .* belongs to the shared server of another ledger \(.*ledger\.sqlite\), not .*other\.sqlite; give each ledger its own --lease; serving this client alone/);
  // The same intent is the second ledger's own business: fresh there, recorded there.
  await expectFresh(second, 'charge:one');
  const { sc } = await call(second, 'fence_status', { intent: 'charge:one' });
  assert.equal(sc.intent.state, 'in_flight');
  const stats = await call(first, 'fence_stats', {});
  assert.equal(stats.sc.process.admitted, 1);
});

test('a client asking for another result TTL or lease than the shared server keeps is served alone, with its own, and told why', async (t) => {
  const { db } = await ledgerIn(t);
  const first = await shared(t, db, { name: 'default-ttl' });
  await expectFresh(first, 'charge:ttl-1');
  const longer = await shared(t, db, { name: 'two-day-ttl', env: { EFFECTFENCE_RESULT_TTL_SECS: '172800' } });
  await logged(longer, /cannot use the shared server: the shared server keeps a lease of 60000 ms and results for 86400000 ms, and this client asks for a lease of 60000 ms and results for 172800000 ms .*; serving this client alone/);
  // Served alone, its fence records its TTL in the ledger, as any server does.
  await eventually(() => spawnSync('sqlite3', [db, "SELECT value FROM retention WHERE name = 'result_ttl_ms'"])
    .stdout.toString().trim() === '172800000', { what: 'the ledger to keep results for two days' });
  await expectFresh(longer, 'charge:ttl-2');
  const stats = await call(first, 'fence_stats', {});
  assert.equal(stats.sc.process.admitted, 1);  // the second client's attempt was not the shared server's
});

test('an unwritable lease directory: the client is served alone, with the reason in the log', async (t) => {
  const { dir, db } = await ledgerIn(t);
  const locked = path.join(dir, 'locked');
  await mkdir(locked);
  const { prefix, bin } = await unprivileged(dir);
  await chmod(locked, 0o555);
  t.after(() => chmod(locked, 0o755).catch(() => {}));
  const session = await shared(t, db, { name: 'unwritable', prefix, bin, extraArgs: ['--lease', path.join(locked, 'l.json')] });
  await logged(session, /cannot use the shared server: .*Permission denied; serving this client alone/);
  await expectFresh(session, 'alone:2');
  assert.equal(await exists(path.join(locked, 'l.json')), false);
});

// A ledger whose lease lies in a directory of its own, which a test can
// make unwritable so that no new server can start; run as an unprivileged
// user when this is root.
async function ledgerWithLeaseDirectory(t) {
  const { dir, db } = await ledgerIn(t);
  const leases = path.join(dir, 'leases');
  await mkdir(leases, { mode: 0o777 });
  await chmod(leases, 0o777);
  const { prefix, bin } = await unprivileged(dir);
  t.after(() => chmod(leases, 0o755).catch(() => {}));
  return { db, leases, leaseFile: path.join(leases, 'l.json'), prefix, bin };
}

test('the server dies and no other can start (lease directory now unwritable): the bridge serves its client alone', async (t) => {
  const { db, leases, leaseFile, prefix, bin } = await ledgerWithLeaseDirectory(t);
  const session = await shared(t, db, { name: 'orphan', prefix, bin, extraArgs: ['--lease', leaseFile] });
  await expectFresh(session, 'orphan:1');
  const server = await readLease(leaseFile);

  await chmod(leases, 0o555);
  process.kill(server.pid, 'SIGKILL');
  await eventually(() => !isAlive(server.pid), { what: 'the shared server to die' });

  await expectFresh(session, 'orphan:2');  // refused connection: never received, so resent to this process's own fence
  await logged(session, /stale \(its owner, pid \d+, is gone\): taking over/);
  await logged(session, /cannot use the shared server: .*Permission denied; serving this client alone/);
  const { sc } = await call(session, 'fence_stats', {});
  assert.equal(sc.process.admitted, 1);  // this process's fence: only orphan:2
  assert.equal(sc.ledger.admitted, 2);
  const again = await call(session, 'fence_prepare', prepareArgs('orphan:2'));
  assert.equal(again.sc.reason, 'in_flight');
});

test('the server dies before the client\'s initialize and no other can start: this process\'s own fence answers the initialize', async (t) => {
  const { db, leases, leaseFile, prefix, bin } = await ledgerWithLeaseDirectory(t);
  const command = [...prefix, bin, 'serve', '--shared', '--db', db, '--log-level', 'debug', '--lease', leaseFile];
  const client = lineProcess(t, command[0], command.slice(1));
  await eventually(() => /: joining/.test(client.stderr()), { what: `the client to join:\n${client.stderr()}` });
  const server = await readLease(leaseFile);
  await chmod(leases, 0o555);
  process.kill(server.pid, 'SIGKILL');
  await eventually(() => !isAlive(server.pid), { what: 'the shared server to die' });

  const answer = await client.ask(INITIALIZE);
  assert.equal(answer.id, 1);
  assert.equal(answer.result?.serverInfo?.name, 'effectfence', JSON.stringify(answer));
  assert.match(client.stderr(), /serving this client alone/);
  client.write(JSON.stringify({ jsonrpc: '2.0', method: 'notifications/initialized' }));
  const prepared = await client.ask(JSON.stringify({
    jsonrpc: '2.0', id: 2, method: 'tools/call', params: { name: 'fence_prepare', arguments: prepareArgs('early:1') },
  }));
  assert.equal(prepared.id, 2);
  assert.equal(prepared.result.structuredContent.status, 'fresh', JSON.stringify(prepared));
  await client.close();
});

test('through the bridge, an oversized response or notification from the client is dropped, never answered', async (t) => {
  const { db } = await ledgerIn(t);
  const client = lineProcess(t, BIN, ['serve', '--shared', '--db', db, '--log-level', 'debug']);
  assert.equal((await client.ask(INITIALIZE)).id, 1);
  client.write(JSON.stringify({ jsonrpc: '2.0', method: 'notifications/initialized' }));
  // Id last, as the TypeScript SDK writes it: the id is the server's, and
  // the client may have a request of its own under the same id.
  client.write(`{"result":{"content":"${'x'.repeat(5 * 1024 * 1024)}"},"jsonrpc":"2.0","id":"p-1"}`);
  client.write(`{"jsonrpc":"2.0","method":"notifications/message","params":{"data":"${'x'.repeat(5 * 1024 * 1024)}"}}`);
  // The next line read is the answer to this ping: nothing was sent for the two above.
  const pong = await client.ask(JSON.stringify({ jsonrpc: '2.0', id: 'p-1', method: 'ping' }));
  assert.deepEqual(pong, { jsonrpc: '2.0', id: 'p-1', result: {} });
  await logged(client, /dropped a response from the client larger than 4194304 bytes/);
  await logged(client, /dropped a notification from the client: message too large/);
  await client.close();
});

test('a lease path that cannot be replaced (a directory): the client is served alone', async (t) => {
  const { db, lease } = await ledgerIn(t);
  await mkdir(path.join(lease, 'inside'), { recursive: true });
  const session = await shared(t, db, { name: 'directory' });
  await logged(session, /cannot use the shared server: cannot read .*server\.json: not a regular file; serving this client alone/);
  await expectFresh(session, 'alone:3');
});

test('a lease another user could have planted (writable by others, or a fifo) is not trusted: the client is served alone at once', async (t) => {
  const { db, lease } = await ledgerIn(t);
  const owner = spawn('sleep', ['30']);
  t.after(() => owner.kill('SIGKILL'));
  await writeFile(lease, plantedLease({ pid: owner.pid, url: 'http://127.0.0.1:9/mcp', ledger: db }), { mode: 0o600 });
  await chmod(lease, 0o666);
  const writable = await shared(t, db, { name: 'writable-lease' });
  await logged(writable, /cannot use the shared server: cannot read .*server\.json: writable by other users: not trusted; serving this client alone/);
  await expectFresh(writable, 'alone:4');

  const other = await ledgerIn(t);
  assert.equal(spawnSync('mkfifo', ['-m', '600', other.lease]).status, 0);
  const fifo = await shared(t, other.db, { name: 'fifo-lease' });
  await logged(fifo, /cannot read .*server\.json: not a regular file; serving this client alone/);
  await expectFresh(fifo, 'alone:5');
});

test('the servers\' log is never written through a symlink planted at its path', async (t) => {
  const { dir, db, lease } = await ledgerIn(t);
  const target = path.join(dir, 'elsewhere.txt');
  await writeFile(target, 'untouched\n');
  assert.equal(spawnSync('ln', ['-s', target, db + '.server.log']).status, 0);
  const session = await shared(t, db, { name: 'symlinked-log' });
  await expectFresh(session, 'shared:symlink');
  assert.equal((await readLease(lease)).ledger !== undefined, true);  // a shared server did start
  assert.equal(await readFile(target, 'utf8'), 'untouched\n');
});

test('two processes racing on a corrupt lease end with exactly one server, and both use it', async (t) => {
  const { db, lease } = await ledgerIn(t);
  await writeFile(lease, '{"format": "not ours"', { mode: 0o600 });
  const [a, b] = await Promise.all([shared(t, db, { name: 'racer-a' }), shared(t, db, { name: 'racer-b' })]);
  const urlOf = async (s) => (await logged(s, /bridging this client to the shared server at (\S+)/))[1];
  assert.equal(await urlOf(a), await urlOf(b));
  await expectFresh(a, 'race:a');
  await expectFresh(b, 'race:b');
  const { sc } = await call(a, 'fence_stats', {});
  assert.equal(sc.process.admitted, 2);
  const log = await readFile(db + '.server.log', 'utf8');
  assert.equal(log.match(/serving sqlite:/g).length, 1, log);
  await a.close();
  await b.close();
  await leaseGone(lease);
});

test('SIGTERM, SIGINT and SIGHUP: the server removes the lease and exits; the bridge starts a new server and goes on', async (t) => {
  const { db, lease } = await ledgerIn(t);
  const session = await shared(t, db, { name: 'signals' });
  for (const signal of ['SIGTERM', 'SIGINT', 'SIGHUP']) {
    await sessionSettled(db);
    const before = await readLease(lease);
    process.kill(before.pid, signal);
    await leaseGone(lease);
    await eventually(() => !isAlive(before.pid), { what: 'the shared server to exit' });
    // The next call finds no server, elects again and is served by a new one.
    await expectFresh(session, `after:${signal}`);
    const after = await readLease(lease);
    assert.notEqual(after.pid, before.pid);
    const log = await readFile(db + '.server.log', 'utf8');
    assert.match(log, new RegExp(`received ${signal}: removing the lease and stopping`));
  }
  await cleanServerLog(db);
});

test('notifications/initialized sent after its server stopped: the bridge opens a session on a new server with it, once', async (t) => {
  const { db, lease } = await ledgerIn(t);
  const bridge = lineProcess(t, BIN, ['serve', '--shared', '--db', db, '--log-level', 'debug']);
  assert.equal((await bridge.ask(INITIALIZE)).result.protocolVersion, '2025-11-25');
  const first = await readLease(lease);
  process.kill(first.pid, 'SIGTERM');  // before the client said initialized
  await leaseGone(lease);
  await eventually(() => !isAlive(first.pid), { what: 'the first server to exit' });

  bridge.write(JSON.stringify({ jsonrpc: '2.0', method: 'notifications/initialized' }));
  await sessionSettled(db);
  assert.notEqual((await readLease(lease)).pid, first.pid);
  assert.deepEqual((await bridge.ask(JSON.stringify({ jsonrpc: '2.0', id: 2, method: 'ping' }))).result, {});
  const log = await newestServerLog(db);
  assert.equal(log.match(/session \w+ opened/g).length, 1, log);
  assert.equal(log.match(/client initialized/g).length, 1, log);  // replayed by the recovery, not sent again
  assert.equal(await bridge.close(), 0);
  assert.doesNotMatch(bridge.stderr(), /Sanitizer|runtime error:/);
});

test('through the bridge too, a session is initialized once: a second initialize is refused and the session goes on', async (t) => {
  const { db } = await ledgerIn(t);
  const bridge = lineProcess(t, BIN, ['serve', '--shared', '--db', db, '--log-level', 'debug']);
  assert.equal((await bridge.ask(INITIALIZE)).result.protocolVersion, '2025-11-25');
  bridge.write(JSON.stringify({ jsonrpc: '2.0', method: 'notifications/initialized' }));
  const again = await bridge.ask(JSON.stringify({
    jsonrpc: '2.0', id: 7, method: 'initialize', params: { protocolVersion: '2025-06-18', capabilities: {} },
  }));
  assert.equal(again.id, 7);
  assert.equal(again.error.code, -32600);
  assert.match(again.error.message, /already initialized \(protocol 2025-11-25\)/);
  assert.deepEqual((await bridge.ask(JSON.stringify({ jsonrpc: '2.0', id: 8, method: 'ping' }))).result, {});
  const log = await newestServerLog(db);
  assert.equal(log.match(/session \w+ opened/g).length, 1, log);
  assert.equal(await bridge.close(), 0);
  assert.doesNotMatch(bridge.stderr(), /Sanitizer|runtime error:/);
});

test('a ping before initialize is answered through the bridge, as by a server of its own', async (t) => {
  const { db } = await ledgerIn(t);
  const bridge = lineProcess(t, BIN, ['serve', '--shared', '--db', db]);
  const early = await bridge.ask(JSON.stringify({ jsonrpc: '2.0', id: 'early', method: 'ping' }));
  assert.deepEqual(early, { jsonrpc: '2.0', id: 'early', result: {} });
  assert.equal((await bridge.ask(INITIALIZE)).result.protocolVersion, '2025-11-25');
  assert.equal(await bridge.close(), 0);
  assert.doesNotMatch(bridge.stderr(), /Sanitizer|runtime error:/);
});

test('a notification the shared server refuses (sent before initialize) is never answered through the bridge', async (t) => {
  const { db } = await ledgerIn(t);
  const bridge = lineProcess(t, BIN, ['serve', '--shared', '--db', db]);
  bridge.write(JSON.stringify({ jsonrpc: '2.0', method: 'notifications/roots/list_changed' }));
  // The next line on stdout is the ping's answer: nothing came for the notification.
  const next = await bridge.ask(JSON.stringify({ jsonrpc: '2.0', id: 'after', method: 'ping' }));
  assert.deepEqual(next, { jsonrpc: '2.0', id: 'after', result: {} });
  assert.equal((await bridge.ask(INITIALIZE)).result.protocolVersion, '2025-11-25');
  // A malformed request, though, is answered to its id, as plain serve answers it.
  const refused = await bridge.ask('{"jsonrpc":"2.0","id":"dup","method":"ping","params":{"a":1,"a":2}}');
  assert.equal(refused.id, 'dup');
  assert.equal(refused.error.code, -32602);
  assert.equal(await bridge.close(), 0);
});

test('SIGTERM while a call waits on a locked ledger: the call is answered, and its ticket commits through the next server', async (t) => {
  const { db, lease } = await ledgerIn(t);
  const session = await shared(t, db, { name: 'drain' });
  await expectFresh(session, 'warm:1');
  const server = await readLease(lease);
  const unlock = await lockLedger(t, db);

  const pending = call(session, 'fence_prepare', prepareArgs('slow:1'));
  await new Promise((resolve) => setTimeout(resolve, 300));
  process.kill(server.pid, 'SIGTERM');
  await leaseGone(lease);  // the lease goes first: nobody new joins a server that is leaving
  assert.ok(isAlive(server.pid));  // still finishing the call that waits for the ledger
  await unlock();

  const admitted = await pending;
  assert.equal(admitted.sc.status, 'fresh');
  await eventually(() => !isAlive(server.pid), { what: 'the old server to exit' });
  // The old server admitted it (it did not turn the call away to a successor).
  assert.match(await readFile(db + '.server.log', 'utf8'), /received SIGTERM[^]*fence_prepare slow:1 by agent-a: fresh[^]*fenced 2 admission\(s\) of an ended session as unknown/);
  // Nobody could commit through the old server once it left, so it fenced the admission;
  // the holder's commit through the next server still resolves it.
  const committed = await call(session, 'fence_commit', { prepared: admitted.sc.prepared, result: { ok: 1 } });
  assert.equal(committed.sc.status, 'committed', JSON.stringify(committed.sc));
});

test('a call the stopping server took but could not answer within its drain grace is answered server_lost, never sent again', async (t) => {
  const { db, lease } = await ledgerIn(t);
  const session = await shared(t, db, { name: 'grace' });
  await expectFresh(session, 'warm:2');
  const server = await readLease(lease);
  const unlock = await lockLedger(t, db);
  // Two calls: the second waits out two busy timeouts (10 s each), past the 15 s grace.
  const first = call(session, 'fence_prepare', prepareArgs('grace:a'));
  await new Promise((resolve) => setTimeout(resolve, 300));
  const second = call(session, 'fence_prepare', prepareArgs('grace:b'));
  await new Promise((resolve) => setTimeout(resolve, 700));
  process.kill(server.pid, 'SIGTERM');
  assert.equal((await first).sc.reason, 'ledger_busy');
  await assert.rejects(second, /stopped while this call was in flight.*Do not run the effect/);
  await unlock();
  await eventually(() => !isAlive(server.pid), { what: 'the old server to exit' });
  // Decided by the old server after all, and fenced as its session ended: never sent to a new one.
  const { sc } = await call(session, 'fence_status', { intent: 'grace:b' });
  assert.ok(['unknown', 'none'].includes(sc.intent.state), JSON.stringify(sc.intent));
  const log = await readFile(db + '.server.log', 'utf8');
  assert.equal((log.match(/fence_prepare grace:b by/g) || []).length <= 1, true, 'grace:b decided at most once');
  assert.doesNotMatch(log, /grace:b[^\n]*prior_failure/);
});

test('a session the server expired is reopened by the bridge with the client\'s own initialize; an abandoned one ends and the server leaves', async (t) => {
  const { db, lease } = await ledgerIn(t);
  const env = { EFFECTFENCE_SHARED_SESSION_TTL_MS: '300', EFFECTFENCE_SHARED_KEEPALIVE_MS: '60000', EFFECTFENCE_SHARED_IDLE_MS: '1500' };
  const session = await shared(t, db, { name: 'expiring', env });
  await expectFresh(session, 'ttl:1');
  const server = await readLease(lease);
  await eventually(async () => /session \w+ closed: no request within the session TTL/.test(await readFile(db + '.server.log', 'utf8')),
    { what: 'the session to expire' });
  await expectFresh(session, 'ttl:2');  // 404, then a new session on the same server
  assert.equal((await readLease(lease)).pid, server.pid);
  await logged(session, /continuing on http:\S+ with a new session/);

  // A direct HTTP client that never says goodbye does not keep the server alive.
  const opened = await request(server.url, {
    headers: { 'Content-Type': 'application/json', Accept: 'application/json', Authorization: `Bearer ${server.token}` },
    body: INITIALIZE,
  });
  assert.equal(opened.status, 200);
  await session.close();
  await leaseGone(lease);
  await eventually(() => !isAlive(server.pid), { what: 'the shared server to exit' });
});

test('a port the server cannot bind: the client is served alone, with the reason in the log', async (t) => {
  const { db, lease } = await ledgerIn(t);
  const taken = net.createServer();
  await new Promise((resolve) => taken.listen(0, '127.0.0.1', resolve));
  t.after(() => taken.close());
  const port = taken.address().port;
  const session = await shared(t, db, { name: 'port', extraArgs: ['--port', String(port)] });
  await logged(session, new RegExp(`cannot use the shared server: cannot bind 127\\.0\\.0\\.1:${port}.*; serving this client alone`));
  await expectFresh(session, 'alone:4');
  assert.equal(await exists(lease), false);  // the candidate that could not bind left nothing behind
});

test('a non-loopback --bind needs --allow-non-loopback, and then prints a warning; shared-only flags need --shared', async (t) => {
  const { db } = await ledgerIn(t);
  const refused = spawnSync(BIN, ['serve', '--shared', '--db', db, '--bind', '0.0.0.0'], { input: '' });
  assert.equal(refused.status, 2);
  assert.match(refused.stderr.toString(), /not a loopback address.*--allow-non-loopback/);
  const withoutShared = spawnSync(BIN, ['serve', '--db', db, '--port', '5'], { input: '' });
  assert.equal(withoutShared.status, 2);
  assert.match(withoutShared.stderr.toString(), /--port applies to the shared server only; add --shared/);
  const session = await shared(t, db, { name: 'remote', extraArgs: ['--bind', '0.0.0.0', '--allow-non-loopback'] });
  await logged(session, /warn: the shared server binds 0\.0\.0\.0, which is not loopback/);
  await expectFresh(session, 'remote:1');
});

test('kill -9 of the shared server: the call in flight gets a clear error, its admission is fenced unknown, never run twice', async (t) => {
  const { db, lease } = await ledgerIn(t);
  const session = await shared(t, db, { name: 'kill9' });
  const admitted = await expectFresh(session, 'payout:9');
  const dead = await readLease(lease);

  process.kill(dead.pid, 'SIGSTOP');  // the next call reaches a server that never answers it
  const port = Number(new URL(dead.url).port);
  const before = await unreadBytesAt(port);
  const inFlight = call(session, 'fence_prepare', prepareArgs('payout:10'));
  // The kernel accepts the bridge's connection for the stopped server and
  // holds the request unread: wait until it is there. Killed before that,
  // the server never had it, and the bridge rightly sends it again (a fixed
  // sleep was seen to be too short under a full suite).
  try {
    await eventually(async () => (await unreadBytesAt(port)) > before, { what: 'the call to reach the stopped server' });
  } catch (error) {
    // What the kernel holds for the port and what the bridge logged are
    // what a reader of this failure needs.
    const sockets = (await socketsOfPort(port)).map((fields) => fields.slice(0, 5).join(' '));
    error.message += `\nsockets of port ${port} (before: ${before} bytes unread):\n${sockets.join('\n')}` +
      `\nbridge's log:\n${session.stderr()}`;
    throw error;
  }
  process.kill(dead.pid, 'SIGKILL');
  await assert.rejects(inFlight, /stopped while this call was in flight.*Do not run the effect/);

  // The bridge took the stale lease over; the new server reaps the dead one's admission.
  const fenced = await eventually(async () => {
    const { sc } = await call(session, 'fence_status', { intent: 'payout:9' });
    return sc.intent.state === 'unknown' ? sc.intent : null;
  }, { what: 'payout:9 to become unknown' });
  assert.ok(Date.now() < admitted.prepared.lease_expires_at_ms);
  assert.ok(fenced.reason.length > 0);
  const retry = await call(session, 'fence_prepare', prepareArgs('payout:9'));
  assert.equal(retry.sc.reason, 'prior_failure');
  await logged(session, /stale \(its owner, pid \d+, is gone\): taking over/);
});

test('a client that leaves holding an admission has it fenced unknown at once, while the server stays up for the others: a retry is refused, never run twice', async (t) => {
  const { db, lease } = await ledgerIn(t);
  const stays = await shared(t, db, { name: 'stays' });
  const leaves = await shared(t, db, { name: 'leaves' });
  const server = await readLease(lease);
  const admitted = await expectFresh(leaves, 'payout:left');
  await expectFresh(stays, 'payout:kept');
  await leaves.close();

  const fenced = await eventually(async () => {
    const { sc } = await call(stays, 'fence_status', { intent: 'payout:left' });
    return sc.intent.state === 'unknown' ? sc.intent : null;
  }, { what: 'payout:left to become unknown' });
  assert.ok(Date.now() < admitted.prepared.lease_expires_at_ms, 'fenced by the session ending, not by its lease');
  assert.match(fenced.reason, /session on the shared effectfence server .* ended before the admission was committed or aborted/);
  const retry = await call(stays, 'fence_prepare', prepareArgs('payout:left'));
  assert.equal(retry.sc.reason, 'prior_failure');
  // The other client's admission is its own: still in flight, and the server is the same one.
  const { sc } = await call(stays, 'fence_status', { intent: 'payout:kept' });
  assert.equal(sc.intent.state, 'in_flight');
  assert.equal((await readLease(lease)).pid, server.pid);
  assert.ok(isAlive(server.pid));
});

test('10 bridges from 10 client processes racing one intent: exactly one fresh, and the shared server counts all 10 attempts', async (t) => {
  const { db, lease } = await ledgerIn(t);
  const clients = Array.from({ length: 10 }, () => clientProcess(t, db));
  for (const c of clients) assert.equal(await c.next(), 'ready');
  const results = await Promise.all(clients.map((c) => c.ask('prepare race:one')));
  const fresh = results.filter((r) => r.status === 'fresh');
  assert.equal(fresh.length, 1, JSON.stringify(results));
  for (const r of results.filter((x) => x.status !== 'fresh')) assert.equal(r.reason, 'in_flight');
  const stats = await clients[0].ask('stats');
  assert.equal(stats.process.total_attempts, 10);
  assert.equal(stats.process.admitted, 1);
  assert.equal(stats.process.refused.in_flight, 9);
  const log = await readFile(db + '.server.log', 'utf8');
  assert.equal(log.match(/serving sqlite:/g).length, 1, log);
  assert.equal(log.match(/session \w+ opened/g).length, 10, log);
  for (const code of await Promise.all(clients.map((c) => c.close()))) assert.equal(code, 0);
  await leaseGone(lease);
  await eventually(async () => /ledger closed; bye/.test(await readFile(db + '.server.log', 'utf8')), { what: 'the server to finish' });
  await cleanServerLog(db);
});

test('Streamable HTTP: token, Origin, Host, sessions, JSON and SSE answers, 202, 404, 405, DELETE', async (t) => {
  const { db, lease } = await ledgerIn(t);
  await shared(t, db, { name: 'keeper' });  // keeps the server up
  const { url, token } = await readLease(lease);
  const port = new URL(url).port;
  const json = { 'Content-Type': 'application/json', Accept: 'application/json, text/event-stream' };
  const auth = { ...json, Authorization: `Bearer ${token}` };

  const anonymous = await request(url, { headers: json, body: INITIALIZE });
  assert.equal(anonymous.status, 401);
  assert.match(anonymous.headers['www-authenticate'], /^Bearer/);
  assert.equal((await request(url, { headers: { ...json, Authorization: 'Bearer wrong' }, body: INITIALIZE })).status, 401);
  assert.equal((await request(url, { headers: { ...auth, Origin: 'http://evil.example' }, body: INITIALIZE })).status, 403);
  // No port is port 80: a page served there is another origin.
  assert.equal((await request(url, { headers: { ...auth, Origin: 'http://localhost' }, body: INITIALIZE })).status, 403);
  assert.equal((await request(url, { headers: { ...auth, Host: 'localhost' }, body: INITIALIZE })).status, 403);
  assert.equal((await request(url, { headers: { ...auth, Host: `evil.example:${port}` }, body: INITIALIZE })).status, 403);
  const fromLocalPage = await request(url, { headers: { ...auth, Origin: `http://localhost:${port}` }, body: INITIALIZE });
  assert.equal(fromLocalPage.status, 200);
  // Ended at once: an open session would keep the server up for its TTL after the test.
  const localSession = { ...auth, 'Mcp-Session-Id': fromLocalPage.headers['mcp-session-id'] };
  assert.equal((await request(url, { method: 'DELETE', headers: localSession })).status, 200);

  const opened = await request(url, { headers: auth, body: INITIALIZE });
  assert.equal(opened.status, 200);
  assert.match(opened.headers['content-type'], /application\/json/);
  assert.equal(JSON.parse(opened.body).result.protocolVersion, '2025-11-25');
  const sid = opened.headers['mcp-session-id'];
  assert.match(sid, /^[0-9a-f]{32}$/);
  const inSession = { ...auth, 'Mcp-Session-Id': sid, 'MCP-Protocol-Version': '2025-11-25' };

  const note = await request(url, { headers: inSession, body: JSON.stringify({ jsonrpc: '2.0', method: 'notifications/initialized' }) });
  assert.equal(note.status, 202);
  assert.equal(note.body, '');

  const sse = await request(url, {
    headers: { ...inSession, Accept: 'text/event-stream' },
    body: JSON.stringify({ jsonrpc: '2.0', id: 'p', method: 'ping' }),
  });
  assert.equal(sse.status, 200);
  assert.match(sse.headers['content-type'], /text\/event-stream/);
  const data = sse.body.split('\n').find((l) => l.startsWith('data: '));
  assert.deepEqual(JSON.parse(data.slice(6)), { jsonrpc: '2.0', id: 'p', result: {} });

  const noSession = await request(url, { headers: auth, body: JSON.stringify({ jsonrpc: '2.0', id: 2, method: 'ping' }) });
  assert.equal(noSession.status, 400);
  const unknown = await request(url, { headers: { ...auth, 'Mcp-Session-Id': 'f'.repeat(32) }, body: JSON.stringify({ jsonrpc: '2.0', id: 3, method: 'ping' }) });
  assert.equal(unknown.status, 404);
  const badVersion = await request(url, { headers: { ...inSession, 'MCP-Protocol-Version': '1999-01-01' }, body: JSON.stringify({ jsonrpc: '2.0', id: 4, method: 'ping' }) });
  assert.equal(badVersion.status, 400);
  const garbage = await request(url, { headers: inSession, body: '{"jsonrpc":' });
  assert.equal(garbage.status, 400);
  assert.equal(JSON.parse(garbage.body).error.code, -32700);
  assert.equal((await request(url, { method: 'GET', headers: inSession })).status, 405);

  assert.equal((await request(url, { method: 'DELETE', headers: inSession })).status, 200);
  assert.equal((await request(url, { headers: inSession, body: JSON.stringify({ jsonrpc: '2.0', id: 5, method: 'ping' }) })).status, 404);
});

test('Streamable HTTP: a message reusing the id of a call in flight is refused "already used", even a malformed one; the call still gets its own answer', async (t) => {
  const { db, lease } = await ledgerIn(t);
  await shared(t, db, { name: 'keeper' });
  const { url, token } = await readLease(lease);
  const auth = { 'Content-Type': 'application/json', Accept: 'application/json, text/event-stream', Authorization: `Bearer ${token}` };
  const opened = await request(url, { headers: auth, body: INITIALIZE });
  assert.equal(opened.status, 200);
  const inSession = { ...auth, 'Mcp-Session-Id': opened.headers['mcp-session-id'] };
  t.after(() => request(url, { method: 'DELETE', headers: inSession }));
  assert.equal((await request(url, { headers: inSession, body: JSON.stringify({ jsonrpc: '2.0', method: 'notifications/initialized' }) })).status, 202);

  const unlock = await lockLedger(t, db);
  const pending = request(url, {
    headers: inSession,
    body: JSON.stringify({ jsonrpc: '2.0', id: 7, method: 'tools/call', params: { name: 'fence_prepare', arguments: prepareArgs('reused:1') } }),
  });
  await new Promise((resolve) => setTimeout(resolve, 300));  // now waiting for the ledger

  for (const body of [
    JSON.stringify({ jsonrpc: '2.0', id: 7, method: 'ping' }),
    JSON.stringify({ jsonrpc: '1.0', id: 7, method: 'ping' }),  // a wrong envelope
    '{"jsonrpc":"2.0","id":7,"method":"ping","method":"tools/list"}',  // ambiguous JSON
  ]) {
    const reused = await request(url, { headers: inSession, body });
    assert.equal(reused.status, 400, body);
    const answer = JSON.parse(reused.body);
    assert.equal(answer.id, 7, body);
    assert.equal(answer.error.code, -32600, body);
    assert.match(answer.error.message, /already used by a call in flight/, body);
  }
  // Not in flight under another id: the malformed message gets its own error.
  const other = JSON.parse((await request(url, { headers: inSession, body: JSON.stringify({ jsonrpc: '1.0', id: 8, method: 'ping' }) })).body);
  assert.equal(other.id, 8);
  assert.doesNotMatch(other.error.message, /already used/);

  await unlock();
  const answered = await pending;
  assert.equal(answered.status, 200);
  const result = JSON.parse(answered.body);
  assert.equal(result.id, 7);
  assert.equal(result.result.structuredContent.status, 'fresh', answered.body);
});

test("the SDK's StreamableHTTPClientTransport talks to the shared server directly with the lease's token", async (t) => {
  const { db, lease } = await ledgerIn(t);
  const bridge = await shared(t, db, { name: 'bridge' });
  const { url, token } = await readLease(lease);

  const client = new Client({ name: 'http-client', version: '1.0.0' });
  const transport = new StreamableHTTPClientTransport(new URL(url), {
    requestInit: { headers: { Authorization: `Bearer ${token}` } },
  });
  await client.connect(transport);
  t.after(() => client.close());
  const session = { client };
  const { tools } = await client.listTools();
  assert.deepEqual(tools.map((x) => x.name).sort(),
    ['fence_abort', 'fence_commit', 'fence_heartbeat', 'fence_prepare', 'fence_stats', 'fence_status']);

  const first = await call(session, 'fence_prepare', prepareArgs('http:1'));
  assert.equal(first.sc.status, 'fresh');
  const duplicate = await call(bridge, 'fence_prepare', prepareArgs('http:1'));  // over stdio, same server
  assert.equal(duplicate.sc.reason, 'in_flight');
  const committed = await call(session, 'fence_commit', { prepared: first.sc.prepared, result: { ok: true } });
  assert.equal(committed.sc.status, 'committed');
  const replay = await call(bridge, 'fence_prepare', prepareArgs('http:1'));
  assert.equal(replay.sc.status, 'already_done');
  assert.equal(replay.sc.cert.hash, committed.sc.cert.hash);
  await transport.terminateSession();
});
