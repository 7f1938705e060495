// Shared pieces of the wrap tests: real MCP servers from npm (pinned in
// package.json) and a fixture server, reached straight or through
// `effectfence wrap`, with the official SDK client.
import { readFileSync, existsSync } from 'node:fs';
import { execFile } from 'node:child_process';
import path from 'node:path';
import { promisify } from 'node:util';
import { fileURLToPath } from 'node:url';


import { BIN, openSession } from './helpers.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const run = promisify(execFile);

export const NODE = process.execPath;
export const TASKMANAGER = path.join(here, 'node_modules/@kazuph/mcp-taskmanager/dist/index.js');
export const FILESYSTEM = path.join(here, 'node_modules/@modelcontextprotocol/server-filesystem/dist/index.js');
export const EFFECT_SERVER = path.join(here, 'fixtures/effect_server.mjs');

// child: the server's argv, e.g. [NODE, TASKMANAGER]. wrapArgs go before "--".
// capabilities and prepare: the client's, as in openSession.
export function connectWrapped(t, { db, child, env = {}, name = 'wrap-e2e', wrapArgs = [], capabilities, prepare }) {
  return openSession(t, {
    command: BIN,
    args: ['wrap', '--db', db, '--log-level', 'debug', ...wrapArgs, '--', ...child],
    env,
    name,
    capabilities,
    prepare,
  });
}

export function connectDirect(t, { child, env = {}, name = 'direct-e2e', capabilities, prepare }) {
  return openSession(t, { command: child[0], args: child.slice(1), env, name, capabilities, prepare });
}

// Every tool, following nextCursor.
export async function allTools(client) {
  const tools = [];
  let cursor;
  do {
    const page = await client.listTools(cursor === undefined ? {} : { cursor });
    tools.push(...page.tools);
    cursor = page.nextCursor;
  } while (cursor !== undefined);
  return tools;
}

export function textOf(result) {
  return (result.content ?? []).filter((c) => c.type === 'text').map((c) => c.text).join('\n');
}

// The fixture's event log: [{pid, event, name}].
export function effectLog(file) {
  if (!existsSync(file)) return [];
  return readFileSync(file, 'utf8').split('\n').filter(Boolean).map((line) => JSON.parse(line));
}

// `effectfence <args>` run to completion; its stdout parsed as JSON.
export async function effectfenceJson(...args) {
  const { stdout } = await run(BIN, args);
  return JSON.parse(stdout);
}

export function planningArgs(label = 'ship the release') {
  return {
    originalRequest: label,
    tasks: [
      { title: 'build', description: 'build it' },
      { title: 'test', description: 'test it' },
    ],
  };
}

export function requestsIn(taskFile) {
  if (!existsSync(taskFile)) return [];
  return JSON.parse(readFileSync(taskFile, 'utf8')).requests;
}
