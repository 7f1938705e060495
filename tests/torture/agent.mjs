// One agent of the torture run: a process that talks to effectfence through
// the official MCP SDK client and runs effects, until SIGINT.
//
//   node agent.mjs '<config json>'
//
// mode "serve":  two `effectfence serve` processes; fence_prepare on one, the
//                effect, then fence_commit on either (a ticket handed to
//                another process half the time)
// mode "shared": the same through a `serve --shared` bridge, committing on
//                the bridge or on a plain `serve` beside it
// mode "wrap":   one `effectfence wrap` in front of effect_child.mjs, calling
//                its `effect` tool (the child records the executions)
//
// Files (under config.dir): exec/<id>.jsonl, the executions this agent ran
// (appended and fsynced before the commit is sent); journal/<id>.jsonl,
// every answer the agent was given; stderr/<id>-<n>.log, each server's
// stderr. Every server started is announced on stdout as {"pid","kind"}, so
// the harness can signal it.
import { createHash } from 'node:crypto';
import { closeSync, fsyncSync, openSync, writeSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';

import { rng as makeRng } from './rng.mjs';
import { fenceArgs, pickName, wrapMs } from './names.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const cfg = JSON.parse(process.argv[2]);
const rng = makeRng(cfg.seed);
const REQUEST_TIMEOUT_MS = 120000;  // longer than any stop the harness makes

let stopping = false;
process.on('SIGINT', () => { stopping = true; });

const journalFd = openSync(path.join(cfg.dir, 'journal', `${cfg.id}.jsonl`), 'a');
function journal(entry) {
  writeSync(journalFd, `${JSON.stringify({ t: Date.now(), agent: cfg.id, ...entry })}\n`);
}

const execFd = openSync(path.join(cfg.dir, 'exec', `${cfg.id}.jsonl`), 'a');
// The effect: a durable line per execution, on disk before anything else.
// A ticket without a token (the planted fault) records a null token hash.
function execute(intent, ticket) {
  const line = `${JSON.stringify({
    mode: 'fence', intent, gen: ticket.generation, token_sha256: ticket.token ? sha256(ticket.token) : null, agent: cfg.id,
    pid: process.pid, t: Date.now(),
  })}\n`;
  writeSync(execFd, line);
  fsyncSync(execFd);
}

const sha256 = (text) => createHash('sha256').update(text).digest('hex');
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

let serversStarted = 0;

// One MCP session with a server process, started again when it dies.
class Connection {
  constructor(kind, args, env = {}) {
    this.kind = kind;
    this.args = args;
    this.env = env;
    this.client = null;
    this.child = null;
  }

  async open() {
    while (!this.client) {
      if (stopping) throw new Error('stopping');
      const stderr = openSync(path.join(cfg.dir, 'stderr', `${cfg.id}-${serversStarted++}-${this.kind}.log`), 'a');
      const transport = new StdioClientTransport({
        command: cfg.bin, args: this.args, env: { ...process.env, ...this.env }, stderr,
      });
      const client = new Client({ name: cfg.id, version: '1.0.0' });
      client.onclose = () => { if (this.client === client) this.client = null; };
      try {
        await client.connect(transport, { timeout: REQUEST_TIMEOUT_MS });
        // The SDK keeps the process to itself; its exit status tells a kill
        // from a crash.
        const child = transport._process;
        const pid = transport.pid;
        process.stdout.write(`${JSON.stringify({ pid, kind: this.kind })}\n`);
        child.on('exit', (code, signal) => journal({ type: 'server_exit', kind: this.kind, pid, code, signal }));
        this.child = child;
        this.client = client;
      } catch (error) {
        journal({ type: 'open_failed', kind: this.kind, error: String(error.message ?? error) });
        await client.close().catch(() => {});
        await sleep(200);
      } finally {
        closeSync(stderr);  // the server has its own copy
      }
    }
    return this.client;
  }

  // {sc, isError} of a tool call, or {error} when no answer came.
  async call(name, args, meta) {
    let client;
    try {
      client = await this.open();
    } catch (error) {
      return { error: String(error.message ?? error) };
    }
    try {
      const params = { name, arguments: args };
      if (meta) params._meta = meta;
      const result = await client.callTool(params, undefined, { timeout: REQUEST_TIMEOUT_MS });
      return { sc: result.structuredContent, isError: result.isError === true, result };
    } catch (error) {
      return { error: String(error.message ?? error) };
    }
  }

  // Ends the session the way a client that is done does: closes the
  // server's input and lets it finish (serve fences what nobody can commit).
  async shutdown() {
    const child = this.child;
    const client = this.client;
    this.client = null;
    if (!child || child.exitCode !== null || child.signalCode !== null) return;
    const exited = new Promise((resolve) => child.once('exit', resolve));
    child.stdin.end();
    const gone = await Promise.race([exited.then(() => true), sleep(30000).then(() => false)]);
    if (!gone) journal({ type: 'server_would_not_stop', kind: this.kind, pid: child.pid });
    await client?.close().catch(() => {});
  }
}

const leaseEnv = cfg.leaseSecs ? { EFFECTFENCE_LEASE_SECS: String(cfg.leaseSecs) } : {};
const connections = [];
if (cfg.mode === 'serve') {
  connections.push(new Connection('serve', ['serve', '--db', cfg.ledger], leaseEnv));
  connections.push(new Connection('serve', ['serve', '--db', cfg.ledger], leaseEnv));
} else if (cfg.mode === 'shared') {
  connections.push(new Connection('bridge', ['serve', '--shared', '--db', cfg.ledger], leaseEnv));
  connections.push(new Connection('serve', ['serve', '--db', cfg.ledger], leaseEnv));
} else {
  const wrapEnv = { ...leaseEnv, TORTURE_EXEC_DIR: path.join(cfg.dir, 'exec'), TORTURE_PLANT: cfg.plant ?? '' };
  connections.push(new Connection('wrap',
    ['wrap', '--db', cfg.ledger, '--key-arg', 'name', '--', process.execPath, path.join(here, 'effect_child.mjs')],
    wrapEnv));
}

const counts = { ops: 0 };

// The work of an admitted attempt: sleeps, with heartbeats if configured.
async function work(conn, ticket) {
  const leaseMs = (cfg.leaseSecs ?? 60) * 1000;
  let left = rng.chance(0.3) ? rng.int(0, Math.min(3000, 2 * leaseMs)) : rng.int(0, 50);
  while (left > 0) {
    const step = cfg.heartbeat ? Math.min(left, Math.max(50, leaseMs / 3)) : left;
    await sleep(step);
    left -= step;
    if (cfg.heartbeat && left > 0) {
      const hb = await conn.call('fence_heartbeat', { prepared: ticket });
      journal({ type: 'heartbeat', intent: ticket.intent, status: hb.sc?.status, reason: hb.sc?.reason, error: hb.error });
    }
  }
}

async function fenceOnce() {
  const [first, second] = connections;
  const intent = pickName(rng, 'f', cfg.t0);
  const prepared = await first.call('fence_prepare', fenceArgs(intent, cfg.id));
  if (prepared.error) {
    journal({ type: 'prepare', intent, error: prepared.error });
    return;
  }
  const sc = prepared.sc;
  if (sc.status === 'already_done') {
    journal({ type: 'prepare', intent, status: sc.status, cert: sc.cert.hash, gen: sc.cert.generation });
    // The negative control: an agent that runs a replayed action again.
    if (cfg.plant === 'ignore') execute(intent, { generation: sc.cert.generation, token: null });
    return;
  }
  if (sc.status !== 'fresh') {
    journal({ type: 'prepare', intent, status: sc.status, reason: sc.reason });
    return;
  }
  const ticket = sc.prepared;
  journal({ type: 'prepare', intent, status: 'fresh', gen: ticket.generation, token_sha256: sha256(ticket.token) });
  await work(first, ticket);
  execute(intent, ticket);
  if (cfg.plant === 'double') execute(intent, ticket);  // the negative control: one admission, two runs
  const result = { by: cfg.id, n: counts.ops };
  let conn = rng.chance(0.5) ? first : second;
  for (let attempt = 0; attempt < 8; attempt++) {
    const committed = await conn.call('fence_commit', { prepared: ticket, result });
    if (committed.sc && !committed.isError && committed.sc.cert) {
      journal({ type: 'commit', intent, gen: ticket.generation, cert: committed.sc.cert.hash, via: conn.kind,
                handed: conn !== first, attempt });
      return;
    }
    const reason = committed.sc?.reason;
    journal({ type: 'commit_failed', intent, gen: ticket.generation, reason, error: committed.error, attempt });
    // A busy ledger or a lost answer: the same ticket and result again,
    // through whichever process is up. Anything else is final.
    if (committed.sc && reason !== 'ledger_busy' && reason !== 'ledger_error') return;
    if (stopping && attempt >= 2) return;
    await sleep(rng.int(20, 300));
    conn = rng.chance(0.5) ? first : second;
  }
}

async function wrapOnce() {
  const [wrap] = connections;
  const key = pickName(rng, 'w', cfg.t0);
  const called = await wrap.call('effect', { name: key, ms: wrapMs(key) });
  if (called.error) {
    journal({ type: 'wrap_call', key, error: called.error });
    return;
  }
  const note = called.result._meta?.effectfence ?? {};
  journal({
    type: 'wrap_call', key, intent: note.intent, replayed: note.replayed, cert: note.certificate,
    refused: note.refused, isError: called.isError,
  });
}

while (!stopping) {
  counts.ops++;
  if (cfg.mode === 'wrap') await wrapOnce();
  else await fenceOnce();
  await sleep(rng.int(2, 40));  // agents think between calls; and the machine is shared
}
await Promise.all(connections.map((c) => c.shutdown()));
journal({ type: 'stopped', ops: counts.ops });
process.exit(0);
