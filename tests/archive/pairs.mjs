// Drives a real `effectfence serve` over stdio: fence_prepare +
// fence_commit pairs, K in flight, each for a new intent, and reports what
// it saw as one JSON line. Used by archive_test.sh to fill ledgers and to
// show that serve keeps answering while an archive runs.
//   node pairs.mjs EFFECTFENCE LEDGER [--pairs N | --seconds S] [--prefix P]
//                  [--domains D] [--in-flight K] [--prepare INTENT] [--stop-file F]
// --stop-file F: stop starting pairs once F exists.
// --prepare INTENT: one prepare of INTENT (same payload as the pairs made
// for it) and its status, e.g. to see a replay of an archived window.
import { spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import { existsSync } from 'node:fs';

const [ef, ledger, ...rest] = process.argv.slice(2);
const opt = { pairs: 0, seconds: 0, prefix: 'order', domains: 4, inFlight: 8, prepare: '', stopFile: '' };
for (let i = 0; i < rest.length; i += 2) {
  const name = rest[i].replace(/^--/, '').replace(/-(\w)/g, (_, c) => c.toUpperCase());
  if (!(name in opt)) throw new Error(`unknown option ${rest[i]}`);
  opt[name] = typeof opt[name] === 'number' ? Number(rest[i + 1]) : rest[i + 1];
}

const child = spawn(ef, ['serve', '--db', ledger], { stdio: ['pipe', 'pipe', 'ignore'] });
const lines = createInterface({ input: child.stdout });
let nextId = 1;
const waiting = new Map();
lines.on('line', (line) => {
  const msg = JSON.parse(line);
  const done = waiting.get(msg.id);
  if (done) {
    waiting.delete(msg.id);
    done(msg);
  }
});
function call(method, params) {
  const id = nextId++;
  child.stdin.write(JSON.stringify({ jsonrpc: '2.0', id, method, params }) + '\n');
  return new Promise((resolve) => waiting.set(id, resolve));
}
const tool = (name, args) => call('tools/call', { name, arguments: args });
const status = (msg) => msg.result?.structuredContent?.status ?? (msg.error ? `error ${msg.error.code}` : 'none');

function prepareArgs(n, intent) {
  return {
    intent: intent ?? `${opt.prefix}-${n}`,
    domain: `account-${n % opt.domains}`,
    tool: 'charge_card',
    args: { order: intent ?? `${opt.prefix}-${n}`, amount_cents: 1299 },
    agent: 'archive-test',
  };
}

await call('initialize', {
  protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'archive-test', version: '1' },
});
child.stdin.write(JSON.stringify({ jsonrpc: '2.0', method: 'notifications/initialized' }) + '\n');

const report = { committed: 0, anomalies: 0, statuses: {}, max_pair_ms: 0 };
if (opt.prepare) {
  const msg = await tool('fence_prepare', prepareArgs(0, opt.prepare));
  report.status = status(msg);
} else {
  const started = Date.now();
  let n = 0;
  const more = () =>
    (opt.pairs > 0 ? n < opt.pairs : Date.now() - started < opt.seconds * 1000) &&
    !(opt.stopFile && existsSync(opt.stopFile));
  async function worker() {
    while (more()) {
      const mine = n++;
      const t0 = Date.now();
      const prepared = await tool('fence_prepare', prepareArgs(mine));
      const s = status(prepared);
      if (s !== 'fresh') {
        report.anomalies++;
        report.statuses[`prepare ${s}`] = (report.statuses[`prepare ${s}`] ?? 0) + 1;
        continue;
      }
      const ticket = prepared.result.structuredContent.prepared;
      const committed = await tool('fence_commit', { prepared: ticket, result: { receipt: `r-${mine}` } });
      const c = status(committed);
      if (c === 'committed') report.committed++;
      else {
        report.anomalies++;
        report.statuses[`commit ${c}`] = (report.statuses[`commit ${c}`] ?? 0) + 1;
      }
      report.max_pair_ms = Math.max(report.max_pair_ms, Date.now() - t0);
    }
  }
  await Promise.all(Array.from({ length: opt.inFlight }, worker));
}
child.stdin.end();
await new Promise((resolve) => child.on('exit', resolve));
console.log(JSON.stringify(report));
