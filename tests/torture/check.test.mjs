// The checker's own negative controls: each promise it checks, broken on
// purpose in a small hand-made history, must be reported; the same history
// unbroken must not. (The planted runs of tools/torture --control break it
// with real processes; these break each check alone.)
import assert from 'node:assert/strict';
import { test } from 'node:test';

import * as check from './check.mjs';

const holder = (pid) => `vm:${pid}`;

// A ledger view as readLedger returns it.
function ledgerOf({ admissions = [], clears = [], certificates = [], intents = [] }) {
  const group = (list) => {
    const map = new Map();
    for (const x of list) {
      if (!map.has(x.intent)) map.set(x.intent, []);
      map.get(x.intent).push(x);
    }
    return map;
  };
  return {
    admissions: group(admissions),
    clears: group(clears),
    certificates: new Map(certificates.map((c) => [c.hash, c])),
    intents: new Map(intents.map((i) => [i.intent, i])),
  };
}

const admit = (intent, generation, pid, at, token = `t${generation}`) =>
  ({ intent, generation, at, kind: 'admitted', detail: { holder: holder(pid), token_sha256: token } });
const ran = (intent, gen, token = `t${gen}`) => ({ mode: 'fence', intent, gen, token_sha256: token, t: 0 });
const kinds = (violations) => violations.map((v) => v.kind).sort();

test('one execution per epoch passes; a second in the same epoch is a double execution', () => {
  const ledger = ledgerOf({
    admissions: [admit('a', 1, 10, 0), admit('a', 2, 11, 5)],
    clears: [{ intent: 'a', generation: 1 }],
  });
  const clean = [];
  check.checkExecutions([ran('a', 1), ran('a', 2)], ledger, clean);
  assert.deepEqual(clean, []);

  const doubled = [];
  check.checkExecutions([ran('a', 1), ran('a', 2), ran('a', 2)], ledger, doubled);
  assert.deepEqual(kinds(doubled), ['double_execution']);

  // Without the clear, generations 1 and 2 are one epoch.
  const unclear = [];
  check.checkExecutions([ran('a', 1), ran('a', 2)], ledgerOf({ admissions: [admit('a', 1, 10, 0), admit('a', 2, 11, 5)] }), unclear);
  assert.deepEqual(kinds(unclear), ['double_execution']);
});

test('an execution under no recorded admission (or another token) is reported', () => {
  const ledger = ledgerOf({ admissions: [admit('a', 1, 10, 0)] });
  const v = [];
  check.checkExecutions([ran('a', 2), ran('b', 1), ran('a', 1, 'forged')], ledger, v);
  assert.deepEqual(kinds(v), ['execution_without_admission', 'execution_without_admission', 'execution_without_admission']);
});

test('a wrapped execution belongs to the latest admission by its wrap before it ran', () => {
  const ledger = ledgerOf({
    admissions: [admit('wrap:effect:k', 1, 20, 100), admit('wrap:effect:k', 2, 21, 300), admit('wrap:effect:k', 3, 20, 500)],
    clears: [{ intent: 'wrap:effect:k', generation: 1 }, { intent: 'wrap:effect:k', generation: 2 }],
  });
  const exec = (wrapPid, t) => ({ mode: 'wrap', intent: 'wrap:effect:k', wrap_pid: wrapPid, t });
  const v = [];
  const resolved = check.checkExecutions([exec(20, 150), exec(21, 350), exec(20, 600)], ledger, v);
  assert.deepEqual(v, []);
  assert.deepEqual(resolved.map((e) => e.gen), [1, 2, 3]);
  const twice = [];
  check.checkExecutions([exec(20, 150), exec(20, 160)], ledger, twice);
  assert.deepEqual(kinds(twice), ['double_execution']);
  const stranger = [];
  check.checkExecutions([exec(99, 150)], ledger, stranger);
  assert.deepEqual(kinds(stranger), ['execution_without_admission']);
});

test('answers: a missing admission, a missing certificate, two certificates for one intent', () => {
  const ledger = ledgerOf({
    admissions: [admit('a', 1, 10, 0)],
    certificates: [{ hash: 'c1', intent: 'a', generation: 1 }],
  });
  const good = [
    { type: 'prepare', status: 'fresh', intent: 'a', gen: 1, token_sha256: 't1' },
    { type: 'commit', intent: 'a', gen: 1, cert: 'c1' },
    { type: 'prepare', status: 'already_done', intent: 'a', cert: 'c1' },
  ];
  const clean = [];
  const answered = check.checkAnswers(good, ledger, clean);
  assert.deepEqual(clean, []);
  assert.equal(answered.get('a').cert, 'c1');

  const v = [];
  check.checkAnswers([
    ...good,
    { type: 'prepare', status: 'fresh', intent: 'a', gen: 2, token_sha256: 't2' },
    { type: 'prepare', status: 'already_done', intent: 'a', cert: 'c2' },
  ], ledger, v);
  assert.deepEqual(kinds(v), ['answered_admission_missing', 'answered_certificate_missing', 'two_certificates']);
});

test('a certificate with no execution of its generation is reported', () => {
  const ledger = ledgerOf({ certificates: [{ hash: 'c1', intent: 'a', generation: 1 }] });
  const v = [];
  check.checkCertificatesRan([{ intent: 'a', gen: 1 }], ledger, v);
  assert.deepEqual(v, []);
  check.checkCertificatesRan([{ intent: 'a', gen: 2 }], ledger, v);
  assert.deepEqual(kinds(v), ['certificate_without_execution']);
});

test('deaths: only the harness\'s signals and clean exits pass', () => {
  const signalled = new Map([[1, new Set(['SIGKILL'])]]);
  const v = [];
  check.checkDeaths([
    { type: 'server_exit', pid: 1, code: null, signal: 'SIGKILL' },
    { type: 'server_exit', pid: 2, code: 0, signal: null },
  ], [], [{ pid: 3, code: 0, asked: true }, { pid: 9, code: null, signal: 'SIGINT', asked: true }], signalled, v);
  assert.deepEqual(v, []);
  check.checkDeaths([
    { type: 'server_exit', pid: 4, code: null, signal: 'SIGABRT' },
    { type: 'server_exit', pid: 5, code: 1, signal: null },
  ], [{ mode: 'child_exit', pid: 6, code: 1 }], [{ pid: 7, code: 1, asked: true }, { pid: 8, code: 0, asked: false },
      { pid: 10, code: null, signal: 'SIGINT', asked: false }], signalled, v);
  assert.equal(v.length, 6);
  assert.ok(v.every((x) => x.kind === 'unexpected_death'));
});
