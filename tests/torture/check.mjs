// The torture run's checker: reads what the agents were told (journals),
// what ran (execution records), and what the ledger holds, once every
// process has stopped; returns the violations, each with its evidence.
//
// The promises checked:
//   1. at most one execution per intent between clears. An execution belongs
//      to the admission it ran under (its generation); the clears of an
//      intent (events kind 'cleared', with the generation they cleared)
//      split its generations into epochs, and each epoch runs at most once;
//   2. every execution ran under an admission the ledger recorded;
//   3. every answered admission is in the ledger's events (same generation,
//      same token hash);
//   4. every answered commit is in the ledger with its certificate, every
//      answer about an intent (commits, replays, wrap results) names one
//      certificate, and a replay after the run returns it;
//   5. `effectfence verify` passes;
//   6. no process died except by the harness's signals;
//   7. no sanitizer report in any stderr.
import { execFileSync, spawnSync } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';

import { fenceArgs, wrapMs } from './names.mjs';

// Sanitizer reports, and what a C++ process prints as it crashes.
const SANITIZER = /ERROR: AddressSanitizer|ERROR: LeakSanitizer|runtime error:|WARNING: ThreadSanitizer|SUMMARY: UndefinedBehaviorSanitizer|terminate called|Assertion `/;

export function readJsonLines(file) {
  const out = [];
  for (const line of readFileSync(file, 'utf8').split('\n')) {
    if (!line) continue;
    try {
      out.push(JSON.parse(line));
    } catch {
      // A line cut by a kill -9 in the middle of a write: the process died
      // before the effect could have been acted on.
      out.push({ type: 'torn', line });
    }
  }
  return out;
}

function readDir(dir) {
  return readdirSync(dir).filter((f) => f.endsWith('.jsonl')).flatMap((f) => readJsonLines(path.join(dir, f)));
}

function sql(ledger, query) {
  const text = execFileSync('sqlite3', ['-cmd', '.timeout 10000', '-json', ledger, query], { maxBuffer: 1 << 30 });
  const trimmed = text.toString().trim();
  return trimmed ? JSON.parse(trimmed) : [];
}

function group(list, key) {
  const map = new Map();
  for (const x of list) {
    const k = key(x);
    if (!map.has(k)) map.set(k, []);
    map.get(k).push(x);
  }
  return map;
}

const holderPid = (actorOrHolder) => Number(String(actorOrHolder).split(':').pop());

// The ledger's side: admissions, clears and certificates per intent.
export function readLedger(ledger) {
  const events = sql(ledger, `SELECT id, at, kind, intent, generation, actor, detail FROM events
                               WHERE kind IN ('admitted', 'takeover', 'cleared') ORDER BY id`)
    .map((e) => ({ ...e, detail: JSON.parse(e.detail) }));
  const certificates = sql(ledger, 'SELECT hash, intent, generation FROM certificates');
  const intents = sql(ledger, 'SELECT intent, state, generation, cert_hash FROM intents');
  return {
    admissions: group(events.filter((e) => e.kind !== 'cleared'), (e) => e.intent),
    clears: group(events.filter((e) => e.kind === 'cleared'), (e) => e.intent),
    certificates: new Map(certificates.map((c) => [c.hash, c])),
    intents: new Map(intents.map((i) => [i.intent, i])),
  };
}

// The generation a wrapped child's execution ran under: the latest
// admission of its intent by the wrap process that is its parent, made
// before it ran (a wrap holds an intent until its child answers, so it
// admits the intent again only after that call is over).
function wrapGeneration(exec, admissions) {
  const mine = (admissions ?? []).filter((a) => holderPid(a.detail.holder) === exec.wrap_pid && a.at <= exec.t + 5);
  return mine.length ? mine[mine.length - 1].generation : null;
}

// Returns the executions with the generation each ran under.
export function checkExecutions(executions, ledger, violations) {
  const perEpoch = new Map();
  const resolved = [];
  for (const exec of executions) {
    const admissions = ledger.admissions.get(exec.intent);
    const gen = exec.mode === 'wrap' ? wrapGeneration(exec, admissions) : exec.gen;
    const admitted = (admissions ?? []).find((a) => a.generation === gen &&
      (exec.mode === 'wrap' || exec.token_sha256 === null || a.detail.token_sha256 === exec.token_sha256));
    if (!admitted) {
      violations.push({ kind: 'execution_without_admission', intent: exec.intent, evidence: { exec, admissions } });
      continue;
    }
    const epoch = (ledger.clears.get(exec.intent) ?? []).filter((c) => c.generation < gen).length;
    const k = `${exec.intent}\u0000${epoch}`;
    if (!perEpoch.has(k)) perEpoch.set(k, []);
    perEpoch.get(k).push({ ...exec, gen, epoch });
    resolved.push({ ...exec, gen, epoch });
  }
  for (const [k, list] of perEpoch) {
    if (list.length < 2) continue;
    const [intent, epoch] = k.split('\u0000');
    violations.push({
      kind: 'double_execution', intent, epoch: Number(epoch),
      evidence: { executions: list, admissions: ledger.admissions.get(intent), clears: ledger.clears.get(intent) },
    });
  }
  return resolved;
}

// Executions that ran after an operator had cleared their own attempt (a
// clear of their generation or a later one, dated before they ran): not a
// violation, since the clear ended their epoch, but the documented limit of
// clearing an intent whose agent had not stopped (docs/OPERATIONS.md: with
// `serve` the holder is the server, and the agent may still run its call).
export function lateExecutions(resolved, ledger) {
  return resolved.filter((e) => (ledger.clears.get(e.intent) ?? []).some((c) => c.generation >= e.gen && c.at < e.t));
}

// What each agent was told, against the ledger. Returns the certificate
// each intent's answers named, for the replay check.
export function checkAnswers(journal, ledger, violations) {
  const answeredCert = new Map();
  const name = (intent, cert, entry) => {
    const seen = answeredCert.get(intent);
    if (seen && seen.cert !== cert) {
      violations.push({ kind: 'two_certificates', intent, evidence: { first: seen.entry, then: entry } });
    }
    if (!seen) answeredCert.set(intent, { cert, entry });
    const row = ledger.certificates.get(cert);
    if (!row || row.intent !== intent) {
      violations.push({ kind: 'answered_certificate_missing', intent, evidence: { entry, row } });
    }
  };
  for (const entry of journal) {
    if (entry.type === 'prepare' && entry.status === 'fresh') {
      const found = (ledger.admissions.get(entry.intent) ?? [])
        .some((a) => a.generation === entry.gen && a.detail.token_sha256 === entry.token_sha256);
      if (!found) violations.push({ kind: 'answered_admission_missing', intent: entry.intent, evidence: { entry } });
    } else if (entry.type === 'prepare' && entry.status === 'already_done') {
      name(entry.intent, entry.cert, entry);
    } else if (entry.type === 'commit') {
      name(entry.intent, entry.cert, entry);
      const row = ledger.certificates.get(entry.cert);
      if (row && row.generation !== entry.gen) {
        violations.push({ kind: 'commit_certificate_of_other_generation', intent: entry.intent, evidence: { entry, row } });
      }
    } else if (entry.type === 'wrap_call' && entry.cert) {
      name(entry.intent, entry.cert, entry);
    }
  }
  return answeredCert;
}

// Every certificate of an effect names an execution of its generation.
export function checkCertificatesRan(executions, ledger, violations) {
  const ran = new Set(executions.map((e) => `${e.intent}\u0000${e.gen}`));
  for (const cert of ledger.certificates.values()) {
    if (!ran.has(`${cert.intent}\u0000${cert.generation}`)) {
      violations.push({ kind: 'certificate_without_execution', intent: cert.intent, evidence: { cert } });
    }
  }
}

// Deaths the harness did not cause. signalled: pid -> Set of signals sent.
export function checkDeaths(journal, executionsRaw, agentExits, signalled, violations) {
  const byHarness = (pid, signal) => signalled.get(pid)?.has(signal);
  for (const e of journal.filter((x) => x.type === 'server_exit')) {
    const ok = e.code === 0 || (e.signal && byHarness(e.pid, e.signal));
    if (!ok) violations.push({ kind: 'unexpected_death', evidence: e });
  }
  for (const e of executionsRaw.filter((x) => x.mode === 'child_exit')) {
    violations.push({ kind: 'unexpected_death', evidence: { ...e, kind: 'wrapped child' } });
  }
  for (const e of agentExits) {
    // Asked to stop, an agent exits 0; one that had not yet installed its
    // SIGINT handler (started just before the end) dies of that SIGINT.
    const stopped = e.asked && (e.code === 0 || e.signal === 'SIGINT');
    const ok = stopped || (e.signal && byHarness(e.pid, e.signal));
    if (!ok) violations.push({ kind: 'unexpected_death', evidence: { ...e, kind: 'agent' } });
  }
  for (const e of journal.filter((x) => x.type === 'server_would_not_stop')) {
    violations.push({ kind: 'would_not_stop', evidence: e });
  }
}

// Every shared server the log names (each logs "serving ... (pid N, ...")
// ended by the harness's SIGKILL or SIGTERM, or idle ("no session for").
export function checkSharedServers(logFile, signalled, violations) {
  let log = '';
  try {
    log = readFileSync(logFile, 'utf8');
  } catch {
    return 0;
  }
  const pids = [...log.matchAll(/: serving .* \(pid (\d+),/g)].map((m) => Number(m[1]));
  const idle = (log.match(/no session for \d+ ms: removing the lease and stopping/g) ?? []).length;
  const unsignalled = pids.filter((pid) => !['SIGKILL', 'SIGTERM'].some((sig) => signalled.get(pid)?.has(sig)));
  if (unsignalled.length > idle) {
    violations.push({ kind: 'unexpected_death', evidence: { kind: 'shared server', pids: unsignalled, idle_stops: idle, log: logFile } });
  }
  return pids.length;
}

export function checkSanitizers(files, violations) {
  let scanned = 0;
  for (const file of files) {
    let text;
    try {
      text = readFileSync(file, 'utf8');
    } catch {
      continue;
    }
    scanned++;
    const m = text.match(SANITIZER);
    if (m) {
      const at = text.indexOf(m[0]);
      violations.push({ kind: 'sanitizer_report', evidence: { file, excerpt: text.slice(Math.max(0, at - 200), at + 1500) } });
    }
  }
  return scanned;
}

export function checkVerify(bin, ledger, violations) {
  const r = spawnSync(bin, ['verify', '--db', ledger], { encoding: 'utf8', maxBuffer: 1 << 28 });
  if (r.status !== 0) {
    violations.push({ kind: 'verify_failed', evidence: { status: r.status, signal: r.signal, stdout: r.stdout.slice(-3000), stderr: r.stderr.slice(-3000) } });
  }
  return r;
}

async function session(bin, args, env, stderrFile) {
  const { openSync } = await import('node:fs');
  const transport = new StdioClientTransport({ command: bin, args, env: { ...process.env, ...env }, stderr: openSync(stderrFile, 'a') });
  const client = new Client({ name: 'torture-checker', version: '1.0.0' });
  await client.connect(transport);
  return client;
}

// A late duplicate of every finished intent gets its certificate replayed,
// the one its answers named, through a new serve (and a new wrap for the
// wrapped tool, whose child must not run).
export async function checkReplays({ bin, ledgerPath, dir, ledger, answered, violations }) {
  let replayed = 0;
  const expected = new Map();
  for (const [intent, row] of ledger.intents) {
    if (row.state === 'done') expected.set(intent, row.cert_hash);
  }
  for (const [intent, { cert, entry }] of answered) {
    const row = ledger.intents.get(intent);
    if (!row || row.state !== 'done' || row.cert_hash !== cert) {
      violations.push({ kind: 'answered_outcome_lost', intent, evidence: { answered: cert, entry, ledger: row } });
    }
  }
  const serve = await session(bin, ['serve', '--db', ledgerPath], {}, path.join(dir, 'stderr', 'checker-serve.log'));
  const wrap = await session(bin, ['wrap', '--db', ledgerPath, '--key-arg', 'name', '--', process.execPath,
    path.join(path.dirname(new URL(import.meta.url).pathname), 'effect_child.mjs')],
    { TORTURE_EXEC_DIR: path.join(dir, 'exec') }, path.join(dir, 'stderr', 'checker-wrap.log'));
  try {
    for (const [intent, cert] of expected) {
      let got;
      if (intent.startsWith('wrap:effect:')) {
        const key = intent.slice('wrap:effect:'.length);
        const r = await wrap.callTool({ name: 'effect', arguments: { name: key, ms: wrapMs(key) } });
        const note = r._meta?.effectfence ?? {};
        got = note.replayed === true ? note.certificate : `not replayed: ${JSON.stringify(note)}`;
      } else {
        const r = await serve.callTool({ name: 'fence_prepare', arguments: fenceArgs(intent, 'checker') });
        got = r.structuredContent?.status === 'already_done' ? r.structuredContent.cert.hash
          : `not replayed: ${JSON.stringify(r.structuredContent)}`;
      }
      replayed++;
      if (got !== cert) violations.push({ kind: 'replay_differs', intent, evidence: { ledger: cert, replay: got } });
    }
  } finally {
    await serve.close();
    await wrap.close();
  }
  return replayed;
}
