// A raw stdio JSON-RPC peer and a byte-level comparison of the lines two
// servers answer with. The SDK client parses what it reads (JSON.parse puts
// integer-like keys first and forgets number spelling), so the mirror test
// reads the lines themselves.
import { spawn } from 'node:child_process';

// A child process spoken to line by line. Every line it writes is kept.
export class RawPeer {
  constructor(command, args, env = {}) {
    this.child = spawn(command, args, { env: { ...process.env, ...env }, stdio: ['pipe', 'pipe', 'pipe'] });
    this.lines = [];
    this.stderr = '';
    this.waiters = [];
    let pending = '';
    this.child.stdout.setEncoding('utf8');
    this.child.stdout.on('data', (chunk) => {
      pending += chunk;
      let end;
      while ((end = pending.indexOf('\n')) >= 0) {
        this.lines.push(pending.slice(0, end));
        pending = pending.slice(end + 1);
      }
      for (const wake of this.waiters.splice(0)) wake();
    });
    this.child.stderr.on('data', (chunk) => { this.stderr += chunk; });
    this.exited = new Promise((resolve) => this.child.on('exit', resolve));
  }

  write(line) {
    this.child.stdin.write(`${line}\n`);
  }

  // Sends a request (params: JSON text, or undefined for none) and returns
  // the response line to it.
  async request(id, method, params) {
    const from = this.lines.length;
    this.write(`{"jsonrpc":"2.0","id":${JSON.stringify(id)},"method":${JSON.stringify(method)}` +
               `${params === undefined ? '' : `,"params":${params}`}}`);
    return this.lineAfter(from, (message) => message.id === id && !('method' in message), `the answer to ${method}`);
  }

  notify(method, params) {
    this.write(`{"jsonrpc":"2.0","method":${JSON.stringify(method)}${params === undefined ? '' : `,"params":${params}`}}`);
  }

  // The first line from index from on whose parsed message matches.
  async lineAfter(from, matches, what, timeoutMs = 20_000) {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const found = this.lines.slice(from).find((line) => matches(JSON.parse(line)));
      if (found !== undefined) return found;
      const left = deadline - Date.now();
      if (left <= 0) throw new Error(`no ${what} within ${timeoutMs} ms; stderr:\n${this.stderr}`);
      await new Promise((resolve) => {
        this.waiters.push(resolve);
        setTimeout(resolve, Math.min(left, 200));
      });
    }
  }

  // The MCP handshake, as a client with no capabilities.
  async initialize() {
    await this.request(0, 'initialize',
      '{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw-e2e","version":"1"}}');
    this.notify('notifications/initialized');
  }

  async close() {
    this.child.stdin.end();
    const timer = setTimeout(() => this.child.kill('SIGKILL'), 5000);
    await this.exited;
    clearTimeout(timer);
  }
}

const SPACE = new Set([' ', '\t', '\n', '\r']);

function skipSpace(text, at) {
  while (at < text.length && SPACE.has(text[at])) at++;
  return at;
}

function skipString(text, at) {
  for (at++; at < text.length; at++) {
    if (text[at] === '\\') at++;
    else if (text[at] === '"') return at + 1;
  }
  throw new Error(`unterminated string in ${text}`);
}

function skipValue(text, at) {
  if (text[at] === '"') return skipString(text, at);
  if (text[at] === '{' || text[at] === '[') {
    let depth = 0;
    for (; at < text.length; at++) {
      const c = text[at];
      if (c === '"') at = skipString(text, at) - 1;
      else if (c === '{' || c === '[') depth++;
      else if ((c === '}' || c === ']') && --depth === 0) return at + 1;
    }
    throw new Error(`unterminated value in ${text}`);
  }
  while (at < text.length && !SPACE.has(text[at]) && !',}]'.includes(text[at])) at++;
  return at;
}

// The members of the JSON object text, in the order written, each with
// its key and its value's text exactly as written (and where they stand).
export function members(text) {
  const out = [];
  let at = skipSpace(text, 0);
  if (text[at] !== '{') throw new Error(`not an object: ${text}`);
  at = skipSpace(text, at + 1);
  while (text[at] === '"') {
    const begin = at;
    const keyEnd = skipString(text, at);
    const key = JSON.parse(text.slice(at, keyEnd));
    at = skipSpace(text, skipSpace(text, keyEnd) + 1);
    const valueEnd = skipValue(text, at);
    out.push({ key, value: text.slice(at, valueEnd), begin, valueBegin: at, valueEnd });
    at = skipSpace(text, valueEnd);
    if (text[at] === ',') at = skipSpace(text, at + 1);
  }
  return out;
}

// objectText without member key, every other byte kept.
export function withoutMember(objectText, key) {
  const list = members(objectText);
  const i = list.findIndex((m) => m.key === key);
  if (i < 0) return objectText;
  let begin = list[i].begin;
  let end;
  if (i + 1 < list.length) {
    end = list[i + 1].begin;
  } else {
    end = list[i].valueEnd;
    if (i > 0) begin = list[i - 1].valueEnd;
  }
  return objectText.slice(0, begin) + objectText.slice(end);
}

// objectText with member key's value replaced by valueText where it stands.
export function withMember(objectText, key, valueText) {
  const m = members(objectText).find((x) => x.key === key);
  if (!m) throw new Error(`no member ${key} in ${objectText}`);
  return objectText.slice(0, m.valueBegin) + valueText + objectText.slice(m.valueEnd);
}

// A tool result wrap sent, without the _meta.effectfence wrap adds: the
// member goes, and so does _meta when wrap added it (it then holds nothing else).
export function withoutFenceNote(resultText) {
  const meta = members(resultText).find((m) => m.key === '_meta');
  if (!meta || !members(meta.value).some((m) => m.key === 'effectfence')) return resultText;
  const rest = withoutMember(meta.value, 'effectfence');
  return members(rest).length === 0 ? withoutMember(resultText, '_meta') : withMember(resultText, '_meta', rest);
}

// A line as the comparison sees it, with the differences docs/WRAP.md lists
// mapped away: the JSON-RPC envelope's members (jsonrpc, id, result, error,
// method, params) are wrap's own to order, so they are put in key order;
// with fenceNote, the result's _meta.effectfence is taken out. Everything
// inside the envelope's values stays byte for byte as written.
export function comparable(line, { fenceNote = false } = {}) {
  return members(line)
    .map((m) => ({ key: m.key, value: fenceNote && m.key === 'result' ? withoutFenceNote(m.value) : m.value }))
    .sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0))
    .map((m) => `${JSON.stringify(m.key)}:${m.value}`)
    .join(',');
}

// Throws, naming the first differing byte, unless the two lines are equal
// after comparable().
// With mustHaveNote, the wrapped line's result must carry _meta.effectfence
// (a fenced call), so the mapping cannot pass a line wrap never noted.
export function assertSameLine(straight, wrapped, options = {}) {
  if (options.mustHaveNote) {
    const result = members(wrapped).find((m) => m.key === 'result');
    const meta = result && members(result.value).find((m) => m.key === '_meta');
    if (!meta || !members(meta.value).some((m) => m.key === 'effectfence')) {
      throw new Error(`no _meta.effectfence in the wrapped line: ${wrapped}`);
    }
  }
  const a = comparable(straight);
  const b = comparable(wrapped, options);
  if (a === b) return;
  let i = 0;
  while (i < a.length && a[i] === b[i]) i++;
  throw new Error(`the lines differ at byte ${i} of the mapped text:\n  straight: ...${a.slice(Math.max(0, i - 40), i + 60)}\n` +
                  `  wrapped:  ...${b.slice(Math.max(0, i - 40), i + 60)}\n(straight line: ${straight}\n wrapped line: ${wrapped})`);
}
