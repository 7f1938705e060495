// The MCP server `effectfence wrap` runs as its child in the torture run: one
// tool, `effect`, whose every run appends a line to the execution record and
// fsyncs it before answering, so a run survives any kill that follows it.
//
//   TORTURE_EXEC_DIR  directory of the execution records: this process
//                     appends to child-<pid>.jsonl there
//   TORTURE_PLANT  "double": record every run twice (the negative control)
//
// A line: {"mode":"wrap","key":K,"wrap_pid":P,"pid":Q,"t":ms}. wrap_pid is
// the wrap process that admitted the call (this process's parent), which
// the checker matches to the admission in the ledger.
import { closeSync, fsyncSync, openSync, writeSync } from 'node:fs';
import path from 'node:path';

import { Server } from '@modelcontextprotocol/sdk/server/index.js';
import { StdioServerTransport } from '@modelcontextprotocol/sdk/server/stdio.js';
import { CallToolRequestSchema, ListToolsRequestSchema } from '@modelcontextprotocol/sdk/types.js';

const fd = openSync(path.join(process.env.TORTURE_EXEC_DIR, `child-${process.pid}.jsonl`), 'a');
const plantDouble = process.env.TORTURE_PLANT === 'double';
const wrapPid = process.ppid;

function recordExecution(key) {
  const line = `${JSON.stringify({ mode: 'wrap', key, wrap_pid: wrapPid, pid: process.pid, t: Date.now() })}\n`;
  writeSync(fd, line);
  if (plantDouble) writeSync(fd, line);
  fsyncSync(fd);
}

// An exit this process chose (not a signal) is logged, so the checker can
// tell a crash of the fixture from a kill by the harness.
let failure = null;
process.on('exit', (code) => {
  if (code !== 0) {
    writeSync(fd, `${JSON.stringify({ mode: 'child_exit', pid: process.pid, code, failure, t: Date.now() })}\n`);
    fsyncSync(fd);
  }
  closeSync(fd);
});
process.on('uncaughtException', (error) => {
  failure = String(error?.stack ?? error);
  process.exit(1);
});
// The wrap that reads this process's answers is gone (killed by the
// harness): nobody can be answered, so this server's work is over.
for (const stream of [process.stdout, process.stderr]) {
  stream.on('error', (error) => {
    if (error.code !== 'EPIPE') throw error;
    process.exit(0);
  });
}

const tools = [{
  name: 'effect',
  description: 'Runs one effect (records it durably), after ms milliseconds of work.',
  inputSchema: {
    type: 'object',
    properties: { name: { type: 'string' }, ms: { type: 'integer' } },
    required: ['name', 'ms'],
  },
  annotations: { destructiveHint: true, idempotentHint: false },
}];

const server = new Server({ name: 'torture-effect', version: '1.0.0' }, { capabilities: { tools: {} } });
server.setRequestHandler(ListToolsRequestSchema, async () => ({ tools }));
server.setRequestHandler(CallToolRequestSchema, async (request) => {
  const { name, ms } = request.params.arguments ?? {};
  await new Promise((resolve) => setTimeout(resolve, Number(ms) || 0));
  recordExecution(String(name));
  return { content: [{ type: 'text', text: `ran ${name} in ${process.pid}` }] };
});

await server.connect(new StdioServerTransport());
