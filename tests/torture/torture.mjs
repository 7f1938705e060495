// The torture run: agents on one SQLite ledger through several `serve`,
// `serve --shared` and `wrap` processes, while the harness kills, stops and
// terminates them at random and an operator clears fenced intents; then the
// checker (check.mjs) holds what ran against what the ledger says.
//
//   node torture.mjs [--minutes N] [--seed S] [--binary PATH] [--plant double|ignore] [--keep]
//
// Exit 0: no violation; 1: violations (printed, with evidence); 2: the run
// itself could not be made. --plant makes the agents misbehave (run one
// admission twice, or run a replayed action again): the checker must fail.
import { execFile, spawn } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

import * as check from './check.mjs';
import { rng as makeRng } from './rng.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));

function parseArgs(argv) {
  const opts = { minutes: 2, seed: Math.floor(Math.random() * 2 ** 31), binary: null, plant: null, keep: false };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    const value = () => {
      if (i + 1 >= argv.length) usage(`${a} needs a value`);
      return argv[++i];
    };
    if (a === '--minutes') opts.minutes = Number(value());
    else if (a === '--seed') opts.seed = Number(value());
    else if (a === '--binary') opts.binary = value();
    else if (a === '--plant') opts.plant = value();
    else if (a === '--keep') opts.keep = true;
    else usage(`unknown argument ${a}`);
  }
  if (!(opts.minutes > 0)) usage('--minutes must be a positive number');
  if (!Number.isInteger(opts.seed) || opts.seed < 0) usage('--seed must be a non-negative integer');
  if (opts.plant !== null && opts.plant !== 'double' && opts.plant !== 'ignore') usage('--plant is double or ignore');
  if (!opts.binary) usage('--binary is required');
  opts.binaryGiven = opts.binary;  // printed as given: the run's figures name no local paths
  opts.binary = path.resolve(opts.binary);
  if (!existsSync(opts.binary)) usage(`no binary at ${opts.binary}`);
  return opts;
}

function usage(why) {
  process.stderr.write(`torture: ${why}\nusage: node torture.mjs --binary PATH [--minutes N] [--seed S] [--plant double|ignore] [--keep]\n`);
  process.exit(2);
}

const opts = parseArgs(process.argv.slice(2));
const rng = makeRng(opts.seed);
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const say = (line) => process.stdout.write(`torture: ${line}\n`);

const dir = mkdtempSync(path.join(os.tmpdir(), 'effectfence-torture-'));
for (const sub of ['journal', 'exec', 'stderr']) mkdirSync(path.join(dir, sub));
const ledger = path.join(dir, 'ledger.sqlite');
const t0 = Date.now();

// ---- processes the harness knows, and the signals it sent -------------------

// Start time (clock ticks since boot) of a pid, to never signal a pid that
// was reused by another process.
function startTime(pid) {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2).split(' ')[19];
  } catch {
    return null;
  }
}

function cmdline(pid) {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0').join(' ');
  } catch {
    return '';
  }
}

const known = new Map();       // pid -> {kind, start}
const signalled = new Map();   // pid -> Set of signal names
const figures = { signals: {}, clears: { done: 0, refused: 0, none_fenced: 0 }, agentsStarted: 0 };

function remember(pid, kind) {
  const start = startTime(pid);
  if (start !== null && !known.has(pid)) known.set(pid, { kind, start });
}

function alive(pid) {
  const k = known.get(pid);
  if (!k || startTime(pid) !== k.start) return false;
  // A zombie is dead already.
  try {
    return !readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].startsWith('Z');
  } catch {
    return false;
  }
}

function send(pid, signal) {
  if (!alive(pid)) return false;
  try {
    process.kill(pid, signal);
  } catch {
    return false;
  }
  if (!signalled.has(pid)) signalled.set(pid, new Set());
  signalled.get(pid).add(signal);
  const kind = known.get(pid).kind;
  figures.signals[signal] ??= {};
  figures.signals[signal][kind] = (figures.signals[signal][kind] ?? 0) + 1;
  return true;
}

// ---- agents ----------------------------------------------------------------

const SLOTS = ['serve', 'serve', 'serve', 'shared', 'shared', 'wrap', 'wrap'];
const slots = SLOTS.map((mode, i) => ({
  mode,
  index: i,
  leaseSecs: rng.pick([1, 2, 5, null]),  // null: the default 60 s
  heartbeat: rng.chance(0.5),
  proc: null,
  generation: 0,
}));
const agentExits = [];
let stopping = false;

function startAgent(slot) {
  const id = `${slot.mode}${slot.index}-${slot.generation++}`;
  const config = {
    id, mode: slot.mode, bin: opts.binary, ledger, dir, t0, seed: rng.int(0, 2 ** 31),
    leaseSecs: slot.leaseSecs, heartbeat: slot.heartbeat, plant: opts.plant,
  };
  const child = spawn(process.execPath, [path.join(here, 'agent.mjs'), JSON.stringify(config)], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  figures.agentsStarted++;
  remember(child.pid, 'agent');
  slot.proc = child;
  let buffered = '';
  child.stdout.on('data', (chunk) => {
    buffered += chunk;
    let nl;
    while ((nl = buffered.indexOf('\n')) >= 0) {
      const line = buffered.slice(0, nl);
      buffered = buffered.slice(nl + 1);
      try {
        const { pid, kind } = JSON.parse(line);
        remember(pid, kind);
      } catch {
        say(`agent ${id} said: ${line}`);
      }
    }
  });
  let stderr = '';
  child.stderr.on('data', (chunk) => { stderr += chunk; });
  child.on('exit', (code, signal) => {
    agentExits.push({ pid: child.pid, agent: id, code, signal, asked: stopping, stderr: stderr.slice(-4000) });
    if (stderr) writeFileSync(path.join(dir, 'stderr', `agent-${id}.log`), stderr);
    if (slot.proc === child) slot.proc = null;
    if (!stopping) setTimeout(() => { if (!stopping && !slot.proc) startAgent(slot); }, 100);
  });
}

// ---- chaos -----------------------------------------------------------------

function sharedServerPid() {
  try {
    const lease = JSON.parse(readFileSync(`${ledger}.server.json`, 'utf8'));
    if (!Number.isInteger(lease.pid) || !cmdline(lease.pid).includes('effectfence')) return null;
    remember(lease.pid, 'shared');
    return lease.pid;
  } catch {
    return null;
  }
}

function wrappedChildren() {
  const out = [];
  for (const [pid, k] of known) {
    if (k.kind !== 'wrap' || !alive(pid)) continue;
    let children = [];
    try {
      children = readFileSync(`/proc/${pid}/task/${pid}/children`, 'utf8').trim().split(/\s+/).filter(Boolean).map(Number);
    } catch {
      continue;
    }
    for (const c of children) {
      if (cmdline(c).includes('effect_child.mjs')) {
        remember(c, 'child');
        out.push(c);
      }
    }
  }
  return out;
}

function targets(kind) {
  if (kind === 'shared') {
    const pid = sharedServerPid();
    return pid && alive(pid) ? [pid] : [];
  }
  if (kind === 'child') return wrappedChildren().filter(alive).sort((a, b) => a - b);
  if (kind === 'agent') return slots.map((s) => s.proc?.pid).filter((p) => p && alive(p));
  return [...known].filter(([pid, k]) => k.kind === kind && alive(pid)).map(([pid]) => pid).sort((a, b) => a - b);
}

const stopped = new Map();  // pid -> timer of its SIGCONT

function stopFor(pid, ms) {
  if (stopped.has(pid) || !send(pid, 'SIGSTOP')) return;
  stopped.set(pid, setTimeout(() => {
    stopped.delete(pid);
    send(pid, 'SIGCONT');
  }, ms));
}

function run(file, args, timeout = 30000) {
  return new Promise((resolve) => {
    execFile(file, args, { timeout, maxBuffer: 1 << 26 }, (error, stdout, stderr) => {
      resolve({ code: error ? (error.code ?? 1) : 0, stdout, stderr });
    });
  });
}

let clearLog = '';
async function operatorClear() {
  const listed = await run('sqlite3', ['-cmd', '.timeout 5000', ledger, 'SELECT intent FROM fenced ORDER BY intent']);
  const fenced = listed.code === 0 ? listed.stdout.split('\n').filter(Boolean) : [];
  if (!fenced.length) {
    figures.clears.none_fenced++;
    return;
  }
  const intent = rng.pick(fenced);
  const r = await run(opts.binary, ['clear', '--db', ledger, '--exact', intent, '--operator', 'torture',
    '--reason', 'torture: an operator clear at a random moment']);
  clearLog += r.stderr;
  if (r.code === 0) figures.clears.done++;
  else figures.clears.refused++;
}

const KILLABLE = [[4, 'serve'], [2, 'bridge'], [2, 'shared'], [3, 'wrap'], [3, 'child'], [3, 'agent']];
const TERMINABLE = [[4, 'serve'], [2, 'bridge'], [2, 'shared'], [3, 'wrap']];

async function chaosStep() {
  const action = rng.weighted([[45, 'kill'], [25, 'stop'], [12, 'term'], [18, 'clear']]);
  if (action === 'clear') return operatorClear();
  const kind = rng.weighted(action === 'term' ? TERMINABLE : KILLABLE);
  const list = targets(kind);
  if (!list.length) return;
  const pid = rng.pick(list);
  if (action === 'kill') send(pid, 'SIGKILL');
  else if (action === 'term') send(pid, 'SIGTERM');
  else stopFor(pid, rng.int(50, 2500));
}

// ---- the run ---------------------------------------------------------------

function total(signal) {
  return Object.values(figures.signals[signal] ?? {}).reduce((a, b) => a + b, 0);
}

function describeSignals(signal) {
  const by = figures.signals[signal] ?? {};
  const parts = Object.keys(by).sort().map((k) => `${k} ${by[k]}`);
  return `${total(signal)}${parts.length ? ` (${parts.join(', ')})` : ''}`;
}

say(`seed ${opts.seed}, ${opts.minutes} minutes, binary ${opts.binaryGiven}${opts.plant ? `, planted fault: ${opts.plant}` : ''}`);
say(`run directory ${dir}`);
const heartbeats = (s) => (s.mode === 'wrap' ? 'by wrap' : s.heartbeat ? 'on' : 'off');
say(`agents: ${slots.map((s) => `${s.mode}${s.index} (lease ${s.leaseSecs ?? 60} s, heartbeats ${heartbeats(s)})`).join(', ')}`);
for (const slot of slots) startAgent(slot);

const deadline = t0 + opts.minutes * 60000;
let nextReport = Date.now() + 60000;
await sleep(1500);  // let the first servers create the ledger before the first kill
while (Date.now() < deadline) {
  await chaosStep();
  await sleep(rng.int(50, 700));
  if (Date.now() >= nextReport) {
    nextReport += 60000;
    say(`${((Date.now() - t0) / 60000).toFixed(1)} min: kill -9 ${total('SIGKILL')}, SIGSTOP ${total('SIGSTOP')}, SIGTERM ${total('SIGTERM')}, clears ${figures.clears.done}`);
  }
}

// ---- stop everything -------------------------------------------------------

stopping = true;
for (const [pid, timer] of stopped) {
  clearTimeout(timer);
  send(pid, 'SIGCONT');
}
stopped.clear();
const harnessErrors = [];
for (const slot of slots) if (slot.proc) slot.proc.kill('SIGINT');
const stopDeadline = Date.now() + 90000;
while (slots.some((s) => s.proc) && Date.now() < stopDeadline) await sleep(100);
for (const slot of slots) {
  if (slot.proc) {
    harnessErrors.push({ kind: 'would_not_stop', evidence: { agent: slot.mode + slot.index, pid: slot.proc.pid } });
    send(slot.proc.pid, 'SIGKILL');
  }
}
const shared = sharedServerPid();
if (shared && alive(shared)) send(shared, 'SIGTERM');
// Every server process must end on its own once its client is gone.
const quietDeadline = Date.now() + 60000;
const lingering = () => [...known].filter(([pid, k]) => k.kind !== 'agent' && alive(pid)).map(([pid]) => pid);
while (lingering().length && Date.now() < quietDeadline) await sleep(200);
for (const pid of lingering()) {
  harnessErrors.push({ kind: 'would_not_stop', evidence: { pid, kind: known.get(pid).kind, cmdline: cmdline(pid) } });
  send(pid, 'SIGKILL');
}
await sleep(500);
const elapsedMin = (Date.now() - t0) / 60000;

// ---- check -----------------------------------------------------------------

const violations = [...harnessErrors];
const journal = readdirSync(path.join(dir, 'journal')).flatMap((f) => check.readJsonLines(path.join(dir, 'journal', f)));
const state = check.readLedger(ledger);
const answered = check.checkAnswers(journal, state, violations);
const replays = await check.checkReplays({ bin: opts.binary, ledgerPath: ledger, dir, ledger: state, answered, violations });
const rawExecs = readdirSync(path.join(dir, 'exec')).flatMap((f) => check.readJsonLines(path.join(dir, 'exec', f)));
const execs = rawExecs.filter((e) => e.mode === 'fence' || e.mode === 'wrap')
  .map((e) => (e.mode === 'wrap' ? { ...e, intent: `wrap:effect:${e.key}` } : e));
const resolved = check.checkExecutions(execs, state, violations);
check.checkCertificatesRan(resolved, state, violations);
check.checkDeaths(journal, rawExecs, agentExits, signalled, violations);
const sharedServers = check.checkSharedServers(`${ledger}.server.log`, signalled, violations);
const verify = check.checkVerify(opts.binary, ledger, violations);
writeFileSync(path.join(dir, 'stderr', 'operator-clears.log'), clearLog);
const stderrFiles = readdirSync(path.join(dir, 'stderr')).map((f) => path.join(dir, 'stderr', f));
stderrFiles.push(`${ledger}.server.log`);
const scanned = check.checkSanitizers(stderrFiles, violations);

// ---- report ----------------------------------------------------------------

const count = (pred) => journal.filter(pred).length;
const prepares = journal.filter((e) => e.type === 'prepare');
const refusedBy = {};
for (const p of prepares.filter((e) => e.status === 'refused')) refusedBy[p.reason] = (refusedBy[p.reason] ?? 0) + 1;
const wrapCalls = journal.filter((e) => e.type === 'wrap_call');
const wrapRefusedBy = {};
for (const w of wrapCalls.filter((e) => e.refused)) wrapRefusedBy[w.refused] = (wrapRefusedBy[w.refused] ?? 0) + 1;
const fmt = (o) => Object.keys(o).sort().map((k) => `${k} ${o[k]}`).join(', ');
const epochs = new Set(resolved.map((e) => `${e.intent}\u0000${e.epoch}`));
const summary = {
  seed: opts.seed, minutes: Number(elapsedMin.toFixed(1)), binary: opts.binary, plant: opts.plant,
  agents_started: figures.agentsStarted,
  prepares: prepares.length,
  fresh: count((e) => e.type === 'prepare' && e.status === 'fresh'),
  replayed: count((e) => e.type === 'prepare' && e.status === 'already_done'),
  refused: refusedBy,
  unanswered_prepares: count((e) => e.type === 'prepare' && e.error),
  commits: count((e) => e.type === 'commit'),
  commits_handed_to_another_process: count((e) => e.type === 'commit' && e.handed),
  commits_retried: count((e) => e.type === 'commit' && e.attempt > 0),
  wrap_calls: wrapCalls.length,
  wrap_ran: count((e) => e.type === 'wrap_call' && e.replayed === false),
  wrap_replayed: count((e) => e.type === 'wrap_call' && e.replayed === true),
  wrap_refused: wrapRefusedBy,
  unanswered_wrap_calls: count((e) => e.type === 'wrap_call' && e.error),
  kills: figures.signals.SIGKILL ?? {}, stops: figures.signals.SIGSTOP ?? {}, terms: figures.signals.SIGTERM ?? {},
  clears: figures.clears,
  executions: resolved.length, executions_after_their_clear: check.lateExecutions(resolved, state).length,
  intents_executed: new Set(resolved.map((e) => e.intent)).size, epochs: epochs.size,
  certificates: state.certificates.size, replays_checked: replays, verify_exit: verify.status,
  stderr_files_scanned: scanned, shared_servers: sharedServers,
  violations: violations.length,
};
writeFileSync(path.join(dir, 'summary.json'), `${JSON.stringify({ ...summary, violation_list: violations }, null, 1)}\n`);

say(`ran ${summary.minutes} minutes, ${summary.agents_started} agent processes, ${sharedServers} shared servers`);
say(`operations: ${summary.prepares} prepares (fresh ${summary.fresh}, replayed ${summary.replayed}, refused ${fmt(refusedBy) || 0}, unanswered ${summary.unanswered_prepares}); ` +
    `${summary.commits} commits (${summary.commits_handed_to_another_process} through another process, ${summary.commits_retried} retried); ` +
    `${summary.wrap_calls} wrap calls (ran ${summary.wrap_ran}, replayed ${summary.wrap_replayed}, refused ${fmt(wrapRefusedBy) || 0}, unanswered ${summary.unanswered_wrap_calls})`);
say(`kill -9: ${describeSignals('SIGKILL')}`);
say(`SIGSTOP/SIGCONT: ${describeSignals('SIGSTOP')}`);
say(`SIGTERM: ${describeSignals('SIGTERM')}`);
say(`operator clears: ${figures.clears.done} (refused ${figures.clears.refused}, nothing fenced ${figures.clears.none_fenced})`);
say(`executions: ${summary.executions} of ${summary.intents_executed} intents in ${summary.epochs} epochs (${summary.executions_after_their_clear} ran after an operator cleared their attempt); ${summary.certificates} certificates; ${replays} replays checked after the run`);
say(`verify: exit ${verify.status}; ${scanned} stderr files scanned for sanitizer reports`);
const byKind = {};
for (const v of violations) byKind[v.kind] = (byKind[v.kind] ?? 0) + 1;
say(`violations: ${violations.length}${violations.length ? ` (${fmt(byKind)})` : ''}`);
for (const v of violations.slice(0, 20)) say(`  ${v.kind}${v.intent ? ` ${v.intent}` : ''}: ${JSON.stringify(v.evidence).slice(0, 2000)}`);
if (violations.length) say(`evidence kept in ${dir} (summary.json has every violation); reproduce with --seed ${opts.seed}`);

if (!violations.length && !opts.keep) rmSync(dir, { recursive: true, force: true });
process.exit(violations.length ? 1 : 0);
