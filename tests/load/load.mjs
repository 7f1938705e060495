#!/usr/bin/env node
// Sustained load through every front door at once, on one ledger, on a
// machine kept busy: plain `serve` processes, `serve --shared` bridges (one
// shared server), and `wrap` processes in front of a real MCP server. Every
// client is the official MCP SDK client with many calls in flight.
//
// Load must never turn into failures: a call is answered with a decision or
// with a named, retryable "busy" (nothing decided), never with a transport
// error, and no intent is fenced unless this script asked for it (an abort).
//
//   node tests/load/load.mjs [--bin build/effectfence] [--seconds 60]
//        [--bridges 20] [--bridge-in-flight 50] [--serves 3] [--serve-in-flight 20]
//        [--wraps 3] [--wrap-in-flight 20] [--hogs 2] [--json FILE]
//        [--plant kill-shared]
//
// It prints calls, answers by kind, transport failures, intents fenced
// without a crash, latency p50/p99/max, each server's RSS through the run
// and the shared server's heap from its /metrics (flat: it grew little after
// warm-up, or leveled off over the last quarter of the run, as a cache does
// at its bound; under a sanitizer the shared server is judged by its heap),
// and `effectfence verify`. Exit 0 iff load made no failure:
// no transport failure, no fence it did not ask for, RSS flat, verify clean,
// no tool ran twice. `--plant kill-shared` kill -9s the shared server
// halfway, and exits 0 iff the checks then fail as they must (the
// harness's negative control).
import { execFileSync, spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

import { Client, StdioClientTransport } from '../e2e/sdk_client.mjs';

const HERE = path.dirname(fileURLToPath(import.meta.url));
const ROOT = path.resolve(HERE, '../..');

function parseArgs(argv) {
  const o = {
    bin: process.env.EFFECTFENCE_BIN ?? path.join(ROOT, 'build/effectfence'),
    seconds: 60, bridges: 20, bridgeInFlight: 50, serves: 3, serveInFlight: 20,
    wraps: 3, wrapInFlight: 20, hogs: 2, json: '', plant: '', keep: false,
  };
  const names = {
    '--bin': 'bin', '--seconds': 'seconds', '--bridges': 'bridges', '--bridge-in-flight': 'bridgeInFlight',
    '--serves': 'serves', '--serve-in-flight': 'serveInFlight', '--wraps': 'wraps',
    '--wrap-in-flight': 'wrapInFlight', '--hogs': 'hogs', '--json': 'json', '--plant': 'plant',
  };
  for (let i = 2; i < argv.length; i++) {
    if (argv[i] === '--keep') { o.keep = true; continue; }
    const key = names[argv[i]];
    if (!key || i + 1 >= argv.length) throw new Error(`unknown or incomplete option ${argv[i]}`);
    const v = argv[++i];
    o[key] = typeof o[key] === 'number' ? Number(v) : v;
    if (typeof o[key] === 'number' && !(o[key] >= 0)) throw new Error(`${argv[i - 1]} wants a number`);
  }
  if (o.plant && o.plant !== 'kill-shared') throw new Error(`unknown --plant ${o.plant}`);
  return o;
}

const opts = parseArgs(process.argv);
if (!existsSync(opts.bin)) {
  console.error(`load: no effectfence binary at ${opts.bin} (build it, or pass --bin)`);
  process.exit(2);
}
const dir = mkdtempSync(path.join(os.tmpdir(), 'effectfence-load-'));
const db = path.join(dir, 'ledger.sqlite');
const effectLog = path.join(dir, 'effects.jsonl');
writeFileSync(effectLog, '');
// Under AddressSanitizer, freed memory waits in a quarantine of up to 256 MiB
// per process before reuse: RSS would climb for reasons of the build, not of
// the server. A small quarantine keeps the check about the server.
const asan = process.env.ASAN_OPTIONS ?? 'detect_leaks=1:abort_on_error=1';
const ENV = {
  ...process.env,
  ASAN_OPTIONS: /quarantine_size_mb/.test(asan) ? asan : `${asan}:quarantine_size_mb=4:thread_local_quarantine_size_kb=64`,
  // Short idle timings, so the shared server leaves soon after its last bridge.
  EFFECTFENCE_SHARED_IDLE_MS: '1000',
  EFFECTFENCE_SHARED_ELECTION_MS: '30000',
  EFFECTFENCE_LOG_LEVEL: 'warn',
  EFFECT_LOG: effectLog,
  EFFECT_GATES: dir,
};

// ---- what is counted ----------------------------------------------------
const stats = {
  calls: 0,
  answers: {},           // kind -> count
  transportFailures: 0,
  failureSamples: [],
  latencies: { shared: [], serve: [], wrap: [] },  // ms, by front door
};
const aborted = new Set();  // intents this script fenced on purpose
function count(kind) { stats.answers[kind] = (stats.answers[kind] ?? 0) + 1; }
function fail(where, error) {
  stats.transportFailures++;
  if (stats.failureSamples.length < 5) stats.failureSamples.push(`${where}: ${String(error?.message ?? error).slice(0, 160)}`);
}

const BUSY_CODE = -32000;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// One tools/call; returns {kind, sc} or null after a transport failure.
// "busy" answers (the server's or the ledger's: nothing was decided) are
// retried after a pause, as a client should.
async function callTool(session, name, args) {
  for (let attempt = 0; ; attempt++) {
    const started = performance.now();
    stats.calls++;
    let result;
    try {
      result = await session.client.callTool({ name, arguments: args }, undefined, { timeout: 300_000 });
    } catch (error) {
      stats.latencies[session.door].push(performance.now() - started);
      if (error?.code === BUSY_CODE) {
        count('busy (server)');
        await sleep(20 + Math.random() * 80 * Math.min(attempt + 1, 10));
        continue;
      }
      fail(`${session.label} ${name}`, error);
      return null;
    }
    stats.latencies[session.door].push(performance.now() - started);
    const sc = result.structuredContent ?? {};
    if (sc.status === 'refused' && sc.reason === 'ledger_busy') {
      count('busy (ledger)');
      await sleep(20 + Math.random() * 80 * Math.min(attempt + 1, 10));
      continue;
    }
    const kind = sc.status === 'refused' ? `refused ${sc.reason}` : (sc.status ?? (result.isError ? 'tool error' : 'wrapped tool answered'));
    count(kind);
    return { kind, sc, result };
  }
}

// ---- front doors ---------------------------------------------------------
async function open(door, label, args) {
  const transport = new StdioClientTransport({ command: opts.bin, args, env: ENV, stderr: 'pipe' });
  let stderr = '';
  transport.stderr.on('data', (chunk) => { stderr += chunk; });
  const client = new Client({ name: label, version: '1.0.0' }, { capabilities: {} });
  await client.connect(transport);
  return { door, label, client, transport, pid: transport.pid, stderr: () => stderr };
}

let unique = 0;
const fresh = (prefix) => `${prefix}:${process.pid}:${++unique}`;

// A fence client's loop: new intents committed, replays, same-instant races,
// stale read-sets and aborts, in proportions a busy gateway sees.
async function fenceLoop(session, until) {
  const committed = [];
  const agent = session.label;
  const prepareArgs = (intent, extra = {}) => ({
    intent, domain: `d:${intent}`, tool: 'charge', args: { order: intent, cents: 4900 }, agent, ...extra,
  });
  while (Date.now() < until) {
    const r = Math.random();
    if (r < 0.1 && committed.length > 0) {  // a late duplicate: replayed
      const intent = committed[Math.floor(Math.random() * committed.length)];
      await callTool(session, 'fence_prepare', prepareArgs(intent));
    } else if (r < 0.2) {  // two attempts at one instant: one admitted, one refused in_flight
      const intent = fresh(agent);
      const [a, b] = await Promise.all([
        callTool(session, 'fence_prepare', prepareArgs(intent)),
        callTool(session, 'fence_prepare', prepareArgs(intent)),
      ]);
      for (const x of [a, b]) {
        if (x?.sc.status === 'fresh') {
          if (await callTool(session, 'fence_commit', { prepared: x.sc.prepared, result: { ok: true } })) committed.push(intent);
        }
      }
    } else if (r < 0.25 && committed.length > 0) {  // decided on a domain that has moved since
      const intent = committed[Math.floor(Math.random() * committed.length)];
      await callTool(session, 'fence_prepare', prepareArgs(fresh(agent), { domain: `d:${intent}`, read_set: [{ domain: `d:${intent}`, seq: 0 }] }));
    } else if (r < 0.28) {  // the tool failed: fenced on purpose
      const intent = fresh(agent);
      const p = await callTool(session, 'fence_prepare', prepareArgs(intent));
      if (p?.sc.status === 'fresh') {
        aborted.add(intent);
        await callTool(session, 'fence_abort', { prepared: p.sc.prepared, reason: 'load test: the tool failed' });
      }
    } else {  // the common case
      const intent = fresh(agent);
      const p = await callTool(session, 'fence_prepare', prepareArgs(intent));
      if (p?.sc.status === 'fresh') {
        if (await callTool(session, 'fence_commit', { prepared: p.sc.prepared, result: { charged: intent } })) committed.push(intent);
      }
    }
  }
}

// A wrapped server's loop: new effects, and repeats of done ones (replayed).
async function wrapLoop(session, until) {
  const done = [];
  while (Date.now() < until) {
    if (Math.random() < 0.2 && done.length > 0) {
      await callTool(session, 'effect', { name: done[Math.floor(Math.random() * done.length)] });
    } else {
      const name = fresh(session.label);
      const x = await callTool(session, 'effect', { name });
      if (x && !x.result.isError) done.push(name);
    }
  }
}

function rssKiB(pid) {
  try {
    const m = readFileSync(`/proc/${pid}/status`, 'utf8').match(/VmRSS:\s+(\d+)/);
    return m ? Number(m[1]) : null;
  } catch { return null; }
}

function sharedServerPid() {
  try { return JSON.parse(readFileSync(`${db}.server.json`, 'utf8')).pid; } catch { return null; }
}

// The shared server's live heap from its GET /metrics: what a leak grows.
// Under a sanitizer RSS also holds the sanitizer's bookkeeping, which grows
// with the variety of work done, so there the heap is what is judged.
async function sharedServerHeap() {
  try {
    const { url, token } = JSON.parse(readFileSync(`${db}.server.json`, 'utf8'));
    const res = await fetch(url.replace(/\/mcp$/, '/metrics'),
                            { headers: { Authorization: `Bearer ${token}` }, signal: AbortSignal.timeout(10000) });
    const m = (await res.text()).match(/^effectfence_heap_bytes\{allocator="([a-z]+)"\} (\d+)$/m);
    return m ? { allocator: m[1], kib: Math.round(Number(m[2]) / 1024) } : null;
  } catch { return null; }
}

function percentile(sorted, p) {
  if (sorted.length === 0) return 0;
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))];
}

// Readers wait for writers: a front door still finishing (or recovering the
// WAL after the kill -9) may hold the lock for a moment.
function sql(query) {
  return execFileSync('sqlite3', ['-readonly', '-cmd', '.timeout 30000', db, query],
                      { encoding: 'utf8' }).trim();
}

// ---- the run -------------------------------------------------------------
const hogs = [];
for (let i = 0; i < opts.hogs; i++) {
  hogs.push(spawn(process.execPath, ['-e', 'for(;;){}'], { stdio: 'ignore' }));
}

const sessions = [];
const fixture = path.join(ROOT, 'tests/e2e/fixtures/effect_server.mjs');
try {
  // Bridges start together, as the clients of one host do: one becomes the shared server.
  const bridges = await Promise.all(Array.from({ length: opts.bridges },
    (_, i) => open('shared', `bridge-${i}`, ['serve', '--shared', '--db', db])));
  const serves = await Promise.all(Array.from({ length: opts.serves },
    (_, i) => open('serve', `serve-${i}`, ['serve', '--db', db])));
  const wraps = await Promise.all(Array.from({ length: opts.wraps },
    (_, i) => open('wrap', `wrap-${i}`, ['wrap', '--db', db, '--', process.execPath, fixture])));
  sessions.push(...bridges, ...serves, ...wraps);

  const until = Date.now() + opts.seconds * 1000;
  const loops = [];
  for (const s of bridges) for (let k = 0; k < opts.bridgeInFlight; k++) loops.push(fenceLoop(s, until));
  for (const s of serves) for (let k = 0; k < opts.serveInFlight; k++) loops.push(fenceLoop(s, until));
  for (const s of wraps) for (let k = 0; k < opts.wrapInFlight; k++) loops.push(wrapLoop(s, until));

  // RSS once warmed up (a quarter of the run), and again at the end.
  const servers = () => {
    const list = [...serves, ...wraps].map((s) => ({ label: s.label, pid: s.pid }));
    const shared = sharedServerPid();
    if (shared) list.push({ label: 'shared server', pid: shared });
    return list;
  };
  const rss = {};
  // The shared server's heap, from /metrics. A scrape can also go
  // unanswered in time because this process, running every client, is
  // starved of CPU: the heap is judged from the first answer once warm.
  const heap = { series: [], allocator: '', scrapes: 0, answered: 0, warm: false };
  const heapSample = async () => {
    ++heap.scrapes;
    const h = await sharedServerHeap();
    if (!h) return null;
    ++heap.answered;
    heap.allocator = h.allocator;
    if (heap.warm && !heap.start) heap.start = h.kib;
    return h.kib;
  };
  const warm = sleep(Math.max(1000, opts.seconds * 250)).then(async () => {
    for (const s of servers()) rss[s.label] = { pid: s.pid, start: rssKiB(s.pid) };
    heap.warm = true;
    await heapSample();
  });
  // RSS (and the shared server's heap) through the run, so a cache filling
  // up to its bound reads apart from a leak.
  const series = {};
  const sampler = setInterval(() => {
    for (const s of servers()) (series[s.label] ??= []).push(rssKiB(s.pid));
    heapSample().then((kib) => heap.series.push(kib));
  }, Math.max(1000, opts.seconds * 50));
  let planted;
  if (opts.plant === 'kill-shared') {
    planted = sleep(opts.seconds * 500).then(() => {
      const pid = sharedServerPid();
      if (pid) process.kill(pid, 'SIGKILL');
    });
  }
  await Promise.all([...loops, warm, planted]);
  clearInterval(sampler);
  for (const s of servers()) {
    if (rss[s.label] && rss[s.label].pid === s.pid) rss[s.label].end = rssKiB(s.pid);
  }
  heap.end = (await heapSample()) ?? (await heapSample());

  for (const h of hogs) h.kill('SIGKILL');  // the load is over: the checks need no competition
  // Clients leave; their servers finish (and would fence what they still held).
  await Promise.all(sessions.map((s) => s.client.close().catch(() => {})));
  for (let i = 0; i < 100 && sharedServerPid(); i++) await sleep(100);

  // ---- the checks ----
  const fenced = sql("SELECT intent || '|' || state FROM intents WHERE state IN ('failed','unknown')")
    .split('\n').filter(Boolean).map((l) => l.split('|'));
  const unasked = fenced.filter(([intent, state]) => state === 'unknown' || !aborted.has(intent));
  const states = sql('SELECT state, count(*) FROM intents GROUP BY state').split('\n').filter(Boolean);
  let verified = '';
  try {
    verified = execFileSync(opts.bin, ['verify', '--db', db], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] }).trim();
  } catch (e) {
    verified = `FAILED: ${e.stdout ?? ''}${e.stderr ?? ''}`.trim();
  }
  const runs = {};
  for (const line of readFileSync(effectLog, 'utf8').split('\n').filter(Boolean)) {
    const e = JSON.parse(line);
    if (e.event === 'effect') runs[e.name] = (runs[e.name] ?? 0) + 1;
  }
  const twice = Object.entries(runs).filter(([, n]) => n > 1).map(([name]) => name);
  const sanitizer = sessions.filter((s) => /(AddressSanitizer|UndefinedBehaviorSanitizer|runtime error:)/.test(s.stderr()));
  // Flat: little growth since warm-up, or leveled off over the last quarter
  // of the run (a cache that filled up to its bound; a leak grows to the end).
  const leveledOff = (samples) => {
    const tail = (samples ?? []).filter((x) => x).slice(-Math.max(2, Math.ceil((samples ?? []).length / 4)));
    return tail.length >= 2 && tail.at(-1) <= tail[0] * 1.02 + 4 * 1024;
  };
  const grewLittle = (r, samples) => r.end <= r.start * 1.25 + 16 * 1024 || leveledOff(samples);
  const sanitized = heap.allocator === 'asan' || heap.allocator === 'tsan';
  const heapFlat = !(heap.start && heap.end) || grewLittle(heap, heap.series);
  const flat = Object.entries(rss).filter(([, r]) => r.start && r.end)
    .map(([label, r]) => ({
      label, ...r,
      flat: label === 'shared server' ? heapFlat && (sanitized || grewLittle(r, series[label])) : grewLittle(r, series[label]),
    }));
  if (!opts.plant && !(heap.start && heap.end)) flat.push({ label: 'shared server heap', flat: false });
  const latency = {};
  for (const [door, list] of Object.entries(stats.latencies)) {
    if (list.length === 0) continue;
    list.sort((a, b) => a - b);
    latency[door] = { calls: list.length, p50: +percentile(list, 50).toFixed(1), p99: +percentile(list, 99).toFixed(1),
                      max: +list.at(-1).toFixed(1) };
  }

  const report = {
    seconds: opts.seconds,
    front_doors: { bridges: opts.bridges, bridge_in_flight: opts.bridgeInFlight, serves: opts.serves,
                   serve_in_flight: opts.serveInFlight, wraps: opts.wraps, wrap_in_flight: opts.wrapInFlight,
                   cpu_hogs: opts.hogs },
    calls: stats.calls,
    calls_per_second: Math.round(stats.calls / opts.seconds),
    answers: stats.answers,
    transport_failures: stats.transportFailures,
    failure_samples: stats.failureSamples,
    fenced_without_crash: unasked.length,
    fenced_on_purpose: fenced.length - unasked.length,
    intents: Object.fromEntries(states.map((l) => l.split('|'))),
    latency_ms: latency,
    rss_kib: flat,
    shared_heap_kib: { allocator: heap.allocator, start: heap.start, end: heap.end, series: heap.series,
                      scrapes: heap.scrapes, answered: heap.answered },
    verify: verified,
    effects_run_twice: twice.length,
    sanitizer_reports: sanitizer.map((s) => s.label),
  };
  const ok = report.transport_failures === 0 && report.fenced_without_crash === 0 && !verified.startsWith('FAILED') &&
             twice.length === 0 && sanitizer.length === 0 && flat.every((r) => r.flat);

  const line = (k, v) => console.log(`${k.padEnd(26)} ${v}`);
  line('duration', `${opts.seconds} s, ${opts.hogs} CPU hog(s)`);
  line('front doors', `${opts.bridges} shared bridges x ${opts.bridgeInFlight}, ${opts.serves} serve x ${opts.serveInFlight}, ${opts.wraps} wrap x ${opts.wrapInFlight} in flight`);
  line('calls', `${report.calls} (${report.calls_per_second}/s)`);
  for (const [k, v] of Object.entries(report.answers).sort()) line(`  ${k}`, v);
  line('transport failures', report.transport_failures);
  for (const s of report.failure_samples) line('  e.g.', s);
  line('fenced without a crash', report.fenced_without_crash);
  line('fenced on purpose', report.fenced_on_purpose);
  line('intents by state', states.join(', ').replaceAll('|', '='));
  for (const [door, l] of Object.entries(latency)) {
    line(`latency ms, ${door}`, `p50 ${l.p50}, p99 ${l.p99}, max ${l.max} (${l.calls} calls)`);
  }
  const mibs = (samples) => (samples ?? []).filter((x) => x).map((x) => Math.round(x / 1024)).join(' ');
  const every = `every ${Math.max(1, opts.seconds / 20)} s`;
  for (const r of flat) {
    if (!r.start) {
      line(`rss ${r.label}`, 'NOT MEASURED (no /metrics answer)');
      continue;
    }
    const judged = r.label === 'shared server' && sanitized ? ' (judged by its heap: RSS holds the sanitizer\'s bookkeeping)' : '';
    line(`rss ${r.label}`, `${Math.round(r.start / 1024)} -> ${Math.round(r.end / 1024)} MiB${r.flat ? '' : '  NOT FLAT'}` +
         `${judged}  (${every}: ${mibs(series[r.label])})`);
  }
  line('scrapes of /metrics', `${heap.answered} of ${heap.scrapes} answered within 10 s`);
  if (heap.start && heap.end) {
    line(`heap shared server`, `${Math.round(heap.start / 1024)} -> ${Math.round(heap.end / 1024)} MiB (${heap.allocator})` +
         `${heapFlat ? '' : '  NOT FLAT'}  (${every}: ${mibs(heap.series)})`);
  }
  line('effects run twice', report.effects_run_twice);
  line('sanitizer reports', sanitizer.length ? report.sanitizer_reports.join(' ') : 0);
  line('verify', verified.split('\n').at(-1));
  if (opts.plant) {
    // The negative control: the checks must catch what was planted.
    const caught = !ok && (report.transport_failures > 0 || report.fenced_without_crash > 0);
    line('result', caught ? `PASS: the planted ${opts.plant} was caught` : `FAIL: the planted ${opts.plant} went unnoticed`);
    process.exitCode = caught ? 0 : 1;
  } else {
    line('result', ok ? 'PASS: load made no failure' : 'FAIL');
    process.exitCode = ok ? 0 : 1;
  }
  if (opts.json) writeFileSync(opts.json, `${JSON.stringify({ ...report, pass: ok }, null, 2)}\n`);
} finally {
  for (const h of hogs) h.kill('SIGKILL');
  for (const s of sessions) { try { process.kill(s.pid, 'SIGKILL'); } catch {} }
  if (!opts.keep) {
    rmSync(dir, { recursive: true, force: true });
  } else {
    for (const s of sessions) writeFileSync(path.join(dir, `${s.label}.log`), s.stderr());
    console.log(`kept ${dir} (the ledger, the shared server's log, each client's server's stderr)`);
  }
}
