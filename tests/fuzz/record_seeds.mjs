// Records real traffic for the front-door fuzzers' seeds: the official MCP
// SDK client (tests/e2e's) talking to `effectfence serve` over stdio, and
// to the shared server over Streamable HTTP through a recording proxy.
//
//   node tests/fuzz/record_seeds.mjs [path/to/effectfence]
//
// Writes tests/fuzz/corpus/stdio/sdk_session.jsonl (the bytes the client
// wrote to serve's stdin) and tests/fuzz/corpus/http/sdk_session.http (every
// HTTP request in fuzz_http's format: "METHOD PATH", header lines, a blank
// line, the body; requests separated by a line "=====").  The shared
// server's token, port and session id are replaced by what fuzz_http uses
// ($TOKEN is fuzz-token, $PORT and $SESSION are filled in as it runs).
import { spawnSync } from 'node:child_process';
import { mkdtemp, readFile, rm, writeFile, mkdir } from 'node:fs/promises';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

import { Client, StdioClientTransport, StreamableHTTPClientTransport } from '../e2e/sdk_client.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const BIN = path.resolve(process.argv[2] ?? path.join(here, '../../build/effectfence'));
const corpus = path.join(here, 'corpus');

function prepareArgs(intent, overrides = {}) {
  return { intent, domain: `order:${intent}`, tool: 'charge', args: { order: intent, amount_cents: 4900 },
    agent: 'agent-a', ...overrides };
}

// What an agent does: every fence tool, a duplicate, a replay, a refusal,
// arguments the schema refuses and a tool that does not exist.
async function traffic(client) {
  await client.listTools();
  await client.ping();
  const sc = async (name, args) => (await client.callTool({ name, arguments: args })).structuredContent;
  const fresh = await sc('fence_prepare', prepareArgs('order-1'));
  await sc('fence_prepare', prepareArgs('order-1', { agent: 'agent-b' }));  // in_flight
  await sc('fence_heartbeat', { prepared: fresh.prepared });
  await sc('fence_commit', { prepared: fresh.prepared, result: { charge: 'ch_1' } });
  await sc('fence_prepare', prepareArgs('order-1'));  // already_done
  const second = await sc('fence_prepare', prepareArgs('order-2', {
    read_set: [{ domain: 'order:order-1', seq: 1 }] }));
  if (second.prepared) await sc('fence_abort', { prepared: second.prepared, reason: 'card declined' });
  await sc('fence_status', { intent: 'order-1' });
  await sc('fence_stats', {});
  await sc('fence_prepare', { intent: 'order-3' });  // arguments the schema refuses
  try {
    await client.callTool({ name: 'no_such_tool', arguments: {} });
  } catch {
    // refused with a JSON-RPC error, as it should be
  }
}

async function recordStdio(dir) {
  const transcript = path.join(dir, 'stdin.jsonl');
  const transport = new StdioClientTransport({
    command: 'sh',
    args: ['-c', 'tee "$0" | exec "$1" serve --db "$2"', transcript, BIN, path.join(dir, 'stdio.sqlite')],
    stderr: 'ignore',
  });
  const client = new Client({ name: 'seed-recorder', version: '1.0.0' });
  await client.connect(transport);
  await traffic(client);
  await client.close();
  await new Promise((resolve) => setTimeout(resolve, 200));  // tee writes its last line
  await mkdir(path.join(corpus, 'stdio'), { recursive: true });
  await writeFile(path.join(corpus, 'stdio', 'sdk_session.jsonl'), await readFile(transcript));
}

async function recordHttp(dir) {
  const db = path.join(dir, 'shared.sqlite');
  const bridge = new Client({ name: 'bridge', version: '1.0.0' });
  await bridge.connect(new StdioClientTransport({ command: BIN, args: ['serve', '--shared', '--db', db],
    stderr: 'ignore' }));
  const lease = JSON.parse(await readFile(`${db}.server.json`, 'utf8'));
  const target = new URL(lease.url);

  const seen = [];
  const proxy = http.createServer((req, res) => {
    let body = '';
    req.on('data', (c) => { body += c; });
    req.on('end', () => {
      seen.push({ method: req.method, path: req.url, headers: req.rawHeaders, body });
      const out = http.request({ host: target.hostname, port: target.port, path: req.url, method: req.method,
        headers: { ...req.headers, host: target.host } }, (answer) => {
        res.writeHead(answer.statusCode, answer.headers);
        answer.pipe(res);
      });
      out.end(body);
    });
  });
  await new Promise((resolve) => proxy.listen(0, '127.0.0.1', resolve));
  const client = new Client({ name: 'http-seed-recorder', version: '1.0.0' });
  const transport = new StreamableHTTPClientTransport(new URL(`http://127.0.0.1:${proxy.address().port}/mcp`), {
    requestInit: { headers: { Authorization: `Bearer ${lease.token}` } },
  });
  await client.connect(transport);
  await traffic(client);
  await transport.terminateSession();
  await client.close();
  await bridge.close();
  proxy.close();

  const text = seen.map(({ method, path: p, headers, body }) => {
    const lines = [`${method} ${p}`];
    for (let i = 0; i < headers.length; i += 2) {
      const name = headers[i];
      let value = headers[i + 1];
      if (/^host$/i.test(name)) value = '127.0.0.1:$PORT';
      if (/^authorization$/i.test(name)) value = 'Bearer $TOKEN';
      if (/^mcp-session-id$/i.test(name)) value = '$SESSION';
      if (/^(connection|content-length|transfer-encoding)$/i.test(name)) continue;  // the socket's business
      lines.push(`${name}: ${value}`);
    }
    return `${lines.join('\n')}\n\n${body}`;
  }).join('\n=====\n');
  await mkdir(path.join(corpus, 'http'), { recursive: true });
  await writeFile(path.join(corpus, 'http', 'sdk_session.http'), text);
}

const dir = await mkdtemp(path.join(os.tmpdir(), 'effectfence-seeds-'));
try {
  await recordStdio(dir);
  await recordHttp(dir);
} finally {
  await rm(dir, { recursive: true, force: true });
}
if (spawnSync('git', ['-C', here, 'status', '--short', 'corpus'], { stdio: 'inherit' }).status !== 0) process.exit(1);
