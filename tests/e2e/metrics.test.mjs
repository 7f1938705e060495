// The numbers effectfence shows Prometheus: the shared server's GET /metrics
// (live, behind the lease's token) and `effectfence stats --prometheus` (the
// ledger's), each checked against what a real client did through a real
// server, and each validated by promtool, the Prometheus project's own checker.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { readFile, symlink, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { test } from 'node:test';

import { BIN, call, httpRequest, lockLedger, openSession, prepareArgs, tempDir } from './helpers.mjs';

const FAST = {
  EFFECTFENCE_SHARED_IDLE_MS: '300',
  EFFECTFENCE_SHARED_BIND_DEADLINE_MS: '1500',
  EFFECTFENCE_SHARED_ELECTION_MS: '10000',
};

const request = (url, options = {}) => httpRequest(url, { method: 'GET', ...options });

// ---- the exposition format, read back ----------------------------------------

// One label set, in a canonical order, as a key.
function seriesKey(name, labels = {}) {
  const parts = Object.keys(labels).sort().map((k) => `${k}=${JSON.stringify(labels[k])}`);
  return `${name}{${parts.join(',')}}`;
}

// Parses text format 0.0.4 strictly enough to catch what this project could
// get wrong: every sample's family has HELP and TYPE before it, label values
// unescape (\\, \", \n only), values are numbers.
export function parseExposition(text) {
  const help = new Map();
  const types = new Map();
  const samples = new Map();
  assert.ok(text.endsWith('\n'), 'the text ends with a newline');
  for (const line of text.slice(0, -1).split('\n')) {
    let m;
    if ((m = /^# HELP ([a-zA-Z_:][a-zA-Z0-9_:]*) (.*)$/.exec(line))) {
      assert.ok(!help.has(m[1]), `one HELP for ${m[1]}`);
      help.set(m[1], m[2]);
      continue;
    }
    if ((m = /^# TYPE ([a-zA-Z_:][a-zA-Z0-9_:]*) (counter|gauge|histogram)$/.exec(line))) {
      assert.ok(help.has(m[1]), `HELP before TYPE for ${m[1]}`);
      types.set(m[1], m[2]);
      continue;
    }
    m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)/.exec(line);
    assert.ok(m, `a sample line: ${JSON.stringify(line)}`);
    const name = m[1];
    let i = name.length;
    const labels = {};
    if (line[i] === '{') {
      i += 1;
      while (line[i] !== '}') {
        const l = /^([a-zA-Z_][a-zA-Z0-9_]*)="/.exec(line.slice(i));
        assert.ok(l, `a label at ${i} of ${JSON.stringify(line)}`);
        i += l[0].length;
        let value = '';
        for (;;) {
          const c = line[i];
          assert.ok(c !== undefined, `an unterminated label value in ${JSON.stringify(line)}`);
          i += 1;
          if (c === '"') break;
          if (c !== '\\') { value += c; continue; }
          const e = line[i];
          i += 1;
          assert.ok(e === '\\' || e === '"' || e === 'n', `escape \\${e} in ${JSON.stringify(line)}`);
          value += e === 'n' ? '\n' : e;
        }
        labels[l[1]] = value;
        if (line[i] === ',') i += 1;
      }
      i += 1;
    }
    assert.equal(line[i], ' ', `a space before the value in ${JSON.stringify(line)}`);
    const raw = line.slice(i + 1);
    const value = raw === '+Inf' ? Infinity : Number(raw);
    assert.ok(raw !== '' && !Number.isNaN(value), `a number: ${JSON.stringify(line)}`);
    const family = types.has(name) ? name : name.replace(/_(bucket|sum|count)$/, '');
    assert.ok(types.has(family), `a TYPE line before ${name}`);
    const key = seriesKey(name, labels);
    assert.ok(!samples.has(key), `one sample for ${key}`);
    samples.set(key, { name, labels, value });
  }
  return { help, types, samples };
}

// A histogram's buckets for one label set: cumulative, ending at +Inf, equal to _count.
function checkHistogram(parsed, name, labels) {
  const buckets = [...parsed.samples.values()]
    .filter((s) => s.name === `${name}_bucket` && Object.entries(labels).every(([k, v]) => s.labels[k] === v))
    .map((s) => ({ le: s.labels.le === '+Inf' ? Infinity : Number(s.labels.le), n: s.value }));
  assert.ok(buckets.length > 1, `${name} has buckets for ${JSON.stringify(labels)}`);
  for (let i = 1; i < buckets.length; i++) {
    assert.ok(buckets[i].le > buckets[i - 1].le, `${name}: bounds increase`);
    assert.ok(buckets[i].n >= buckets[i - 1].n, `${name}: buckets are cumulative`);
  }
  assert.equal(buckets.at(-1).le, Infinity, `${name}: the last bucket is +Inf`);
  assert.equal(buckets.at(-1).n, parsed.samples.get(seriesKey(`${name}_count`, labels)).value, `${name}: +Inf = _count`);
  assert.ok(parsed.samples.has(seriesKey(`${name}_sum`, labels)), `${name} has _sum`);
}

// promtool (Debian's prometheus package) lints the text as Prometheus reads it.
function promtool(text) {
  const r = spawnSync('promtool', ['check', 'metrics'], { input: text });
  assert.ok(!r.error, `promtool must be installed (tools/install-deps --tests): ${r.error?.message}`);
  return { status: r.status, output: `${r.stdout}${r.stderr}` };
}

function assertPromtoolAccepts(text) {
  const { status, output } = promtool(text);
  assert.equal(status, 0, `promtool check metrics:\n${output}\n${text}`);
  assert.equal(output.trim(), '', `promtool has no complaint:\n${output}`);
}

test('promtool and the parser here catch what a broken writer would print (negative controls)', () => {
  const good = '# HELP x_total Things\n# TYPE x_total counter\nx_total{path="a\\"b"} 1\n';
  assertPromtoolAccepts(good);
  parseExposition(good);
  const unescaped = good.replace('a\\"b', 'a"b');
  assert.notEqual(promtool(unescaped).status, 0, 'an unescaped quote is refused by promtool');
  assert.throws(() => parseExposition(unescaped));
  const noTotal = '# HELP x Things\n# TYPE x counter\nx 1\n';
  assert.match(promtool(noTotal).output, /_total/, 'a counter without _total is flagged');
  assert.throws(() => parseExposition('x_total 1\n'), /TYPE/);
});

// ---- the shared server ------------------------------------------------------

async function sharedClient(t, db) {
  const session = await openSession(t, {
    command: BIN,
    args: ['serve', '--shared', '--db', db, '--log-level', 'debug'],
    env: FAST,
    name: 'metrics',
  });
  t.after(async () => {
    await session.close();
    assert.doesNotMatch(session.stderr(), /Sanitizer|runtime error:/);
  });
  return session;
}

function delta(before, after) {
  const moved = new Map();
  for (const [key, s] of after.samples) {
    const was = before.samples.get(key)?.value ?? 0;
    if (s.value !== was) moved.set(key, s.value - was);
  }
  return moved;
}

test('GET /metrics: refused without the token as /mcp is; with it, the counters move by exactly what the clients were told', async (t) => {
  const dir = await tempDir(t);
  const db = path.join(dir, 'ledger.sqlite');
  const client = await sharedClient(t, db);
  const { url, token } = JSON.parse(await readFile(`${db}.server.json`, 'utf8'));
  const metricsUrl = url.replace(/\/mcp$/, '/metrics');
  const port = new URL(url).port;
  const auth = { Authorization: `Bearer ${token}` };

  const anonymous = await request(metricsUrl);
  assert.equal(anonymous.status, 401);
  assert.match(anonymous.headers['www-authenticate'], /^Bearer/);
  assert.doesNotMatch(anonymous.body, /effectfence_/);
  assert.equal((await request(metricsUrl, { headers: { Authorization: 'Bearer wrong' } })).status, 401);
  assert.equal((await request(metricsUrl, { headers: { ...auth, Host: `evil.example:${port}` } })).status, 403);
  assert.equal((await request(metricsUrl, { headers: { ...auth, Origin: 'http://evil.example' } })).status, 403);
  assert.equal((await request(url, { headers: auth })).status, 405, 'GET /mcp is still 405');

  const scrape = async () => {
    const r = await request(metricsUrl, { headers: auth });
    assert.equal(r.status, 200, r.body);
    assert.equal(r.headers['content-type'], 'text/plain; version=0.0.4; charset=utf-8');
    assertPromtoolAccepts(r.body);
    return parseExposition(r.body);
  };
  const before = await scrape();
  for (const [name, type] of before.types) {
    assert.match(name, /^effectfence_/);
    assert.equal(type === 'counter', name.endsWith('_total'), name);
  }

  // Each answer the client got, counted here as /metrics should count it.
  const expected = new Map();
  const add = (name, labels, n = 1) => expected.set(seriesKey(name, labels), (expected.get(seriesKey(name, labels)) ?? 0) + n);
  const calls = { fence_prepare: 0, fence_commit: 0, fence_abort: 0, fence_heartbeat: 0 };
  const PREVENTING = ['in_flight', 'domain_race', 'stale_read_set', 'prior_failure', 'payload_mismatch'];
  const tool = async (name, args) => {
    const { sc } = await call(client, name, args);
    calls[name] += 1;
    if (sc.status === 'refused') {
      add('effectfence_refusals_total', { tool: name, reason: sc.reason });
      if (name === 'fence_prepare' && PREVENTING.includes(sc.reason)) add('effectfence_prevented_total', {});
    } else {
      const counted = { fresh: 'admissions', already_done: 'replays', committed: 'commits', aborted: 'aborts', extended: 'lease_extensions' }[sc.status];
      assert.ok(counted, `an outcome /metrics counts: ${JSON.stringify(sc)}`);
      add(`effectfence_${counted}_total`, {});
      if (sc.status === 'already_done') add('effectfence_prevented_total', {});
    }
    return sc;
  };

  const a = await tool('fence_prepare', prepareArgs('metrics:a'));
  assert.equal(a.status, 'fresh');
  assert.equal((await tool('fence_prepare', prepareArgs('metrics:a'))).reason, 'in_flight');
  assert.equal((await tool('fence_heartbeat', { prepared: a.prepared })).status, 'extended');
  assert.equal((await tool('fence_commit', { prepared: a.prepared, result: { charged: true } })).status, 'committed');
  assert.equal((await tool('fence_prepare', prepareArgs('metrics:a'))).status, 'already_done');
  assert.equal((await tool('fence_prepare', prepareArgs('metrics:a', { args: { order: 'other' } }))).reason, 'payload_mismatch');
  assert.equal((await tool('fence_heartbeat', { prepared: a.prepared })).reason, 'lease_lost');
  const b = await tool('fence_prepare', prepareArgs('metrics:b'));
  assert.equal((await tool('fence_abort', { prepared: b.prepared, reason: 'the provider timed out' })).status, 'aborted');
  assert.equal((await tool('fence_prepare', prepareArgs('metrics:b'))).reason, 'prior_failure');
  // A ledger locked past the busy timeout (10 s): refused ledger_busy, which the second alert watches.
  const unlock = await lockLedger(t, db);
  assert.equal((await tool('fence_prepare', prepareArgs('metrics:c'))).reason, 'ledger_busy');
  await unlock();
  const c = await tool('fence_prepare', prepareArgs('metrics:c'));
  assert.equal(c.status, 'fresh');
  assert.equal((await tool('fence_commit', { prepared: c.prepared, result: { charged: true } })).status, 'committed');
  // Read-only tools and malformed tickets decide nothing, and count nothing.
  await call(client, 'fence_status', { intent: 'metrics:a' });
  await call(client, 'fence_stats', {});
  await call(client, 'fence_commit', { prepared: { intent: 'metrics:a' }, result: {} });
  for (const [name, n] of Object.entries(calls)) add('effectfence_decision_seconds_count', { tool: name }, n);

  const after = await scrape();
  const moved = delta(before, after);
  // The live heap, as the allocator counts it, under the allocator's name.
  const heap = [...after.samples.keys()].filter((k) => k.startsWith('effectfence_heap_bytes{'));
  assert.equal(heap.length, 1, 'one effectfence_heap_bytes sample');
  assert.match(heap[0], /allocator="(glibc|asan|tsan)"/);
  assert.ok(after.samples.get(heap[0]).value > 0, 'the heap gauge counts something');
  for (const [key, n] of expected) assert.equal(moved.get(key), n, `${key} moved by ${n}`);
  for (const [key, n] of moved) {
    if (expected.has(key)) continue;
    // Besides the counts above, only latency (buckets, sums), the ledger's batching and the heap gauge may move.
    assert.match(key, /^effectfence_(decision_seconds_(bucket|sum)|group_commit_\w+|heap_bytes)\{/, `${key} moved by ${n} and should not have`);
  }
  for (const name of Object.keys(calls)) checkHistogram(after, 'effectfence_decision_seconds', { tool: name });
  const busy = seriesKey('effectfence_decision_seconds_bucket', { tool: 'fence_prepare', le: '5' });
  assert.equal(moved.get(busy) ?? 0, calls.fence_prepare - 1, 'every prepare but the locked one took under 5 s');
  const decisions = after.samples.get(seriesKey('effectfence_group_commit_decisions_total')).value;
  const transactions = after.samples.get(seriesKey('effectfence_group_commit_transactions_total')).value;
  assert.ok(transactions > 0 && decisions >= transactions, `decisions ${decisions} over transactions ${transactions}`);

  // The same decisions, ledger-wide, from the file; through a directory
  // whose name needs every escape the format has.
  const odd = path.join(dir, 'a "quoted" \\ and\nnewline');
  await symlink(dir, odd);
  const ledgerPath = path.join(odd, 'ledger.sqlite');
  const stats = spawnSync(BIN, ['stats', '--db', ledgerPath, '--prometheus'], { encoding: 'utf8' });
  assert.equal(stats.status, 0, stats.stderr);
  assertPromtoolAccepts(stats.stdout);
  const ledger = parseExposition(stats.stdout);
  const at = (name, labels = {}) => ledger.samples.get(seriesKey(name, { ledger: ledgerPath, ...labels }))?.value;
  assert.equal(at('effectfence_ledger_admissions_total'), 3);
  assert.equal(at('effectfence_ledger_replays_total'), 1);
  assert.equal(at('effectfence_ledger_refusals_total', { reason: 'in_flight' }), 1);
  assert.equal(at('effectfence_ledger_refusals_total', { reason: 'payload_mismatch' }), 1);
  assert.equal(at('effectfence_ledger_refusals_total', { reason: 'prior_failure' }), 1);
  assert.equal(at('effectfence_ledger_refusals_total', { reason: 'domain_race' }), 0);
  assert.equal(at('effectfence_ledger_refusals_total', { reason: 'stale_read_set' }), 0);
  assert.equal(at('effectfence_ledger_prevented_total'), 4);
  assert.equal(at('effectfence_ledger_commits_total'), 2);
  assert.equal(at('effectfence_ledger_aborts_total'), 1);
  assert.deepEqual(
    ['in_flight', 'done', 'failed', 'unknown', 'cleared'].map((state) => at('effectfence_ledger_intents', { state })),
    [0, 2, 1, 0, 0]);
  assert.equal(at('effectfence_ledger_certificates'), 2);
  assert.ok(at('effectfence_ledger_events') > 0);
  for (const s of ledger.samples.values()) assert.equal(s.labels.ledger, ledgerPath, 'every sample names its ledger');
  // The same numbers as stats --json.
  const json = JSON.parse(spawnSync(BIN, ['stats', '--db', ledgerPath, '--json'], { encoding: 'utf8' }).stdout);
  assert.equal(at('effectfence_ledger_admissions_total'), json.ledger.admitted);
  assert.equal(at('effectfence_ledger_prevented_total'), json.ledger.prevented);
  assert.equal(at('effectfence_ledger_intents', { state: 'failed' }), json.intents.failed);
  assert.notEqual(spawnSync(BIN, ['stats', '--db', ledgerPath, '--prometheus', '--json']).status, 0);
});

// The alert rules docs/OPERATIONS.md gives, as promtool loads and runs them,
// over the series the test above saw move: each fires on trouble, and
// neither fires on a healthy ledger (the negative control).
test('the alerts in OPERATIONS.md load, fire on fenced intents and ledger_busy refusals, and stay quiet otherwise', async (t) => {
  const doc = await readFile(new URL('../../docs/OPERATIONS.md', import.meta.url), 'utf8');
  const rules = /```yaml\n(groups:[\s\S]*?)```/.exec(doc)?.[1];
  assert.ok(rules, 'OPERATIONS.md has the alert rules');
  const dir = await tempDir(t);
  await writeFile(path.join(dir, 'rules.yml'), rules);
  const check = spawnSync('promtool', ['check', 'rules', path.join(dir, 'rules.yml')], { encoding: 'utf8' });
  assert.equal(check.status, 0, `${check.stdout}${check.stderr}`);
  const fenced = "effectfence_ledger_intents{ledger=\"L\",state=\"failed\"}";
  const busy = "effectfence_refusals_total{tool=\"fence_prepare\",reason=\"ledger_busy\"}";
  const scenario = (failed, busyValues, alerts) => `
  - interval: 1m
    input_series:
      - series: '${fenced}'
        values: '${failed}'
      - series: 'effectfence_ledger_intents{ledger="L",state="unknown"}'
        values: '0x30'
      - series: '${busy}'
        values: '${busyValues}'
    alert_rule_test:
      - eval_time: 20m
        alertname: EffectfenceFencedIntents
        exp_alerts:${alerts ? `
          - exp_labels: {ledger: L}
            exp_annotations: {summary: "1 fenced intent(s) on L: effectfence fenced --db LEDGER"}` : ' []'}
      - eval_time: 20m
        alertname: EffectfenceLedgerTrouble
        exp_alerts:${alerts ? `
          - exp_annotations: {summary: "the ledger refuses decisions as busy or failing; see the shared server's log"}` : ' []'}
`;
  await writeFile(path.join(dir, 'tests.yml'), `rule_files: [rules.yml]\nevaluation_interval: 1m\ntests:${
    scenario('1x30', '0+1x30', true)}${scenario('0x30', '3x30', false)}`);
  const run = spawnSync('promtool', ['test', 'rules', 'tests.yml'], { cwd: dir, encoding: 'utf8' });
  assert.equal(run.status, 0, `${run.stdout}${run.stderr}`);
  // The negative control: expecting the quiet scenario to fire must fail.
  await writeFile(path.join(dir, 'wrong.yml'), `rule_files: [rules.yml]\nevaluation_interval: 1m\ntests:${scenario('0x30', '3x30', true)}`);
  assert.notEqual(spawnSync('promtool', ['test', 'rules', 'wrong.yml'], { cwd: dir }).status, 0);
});
