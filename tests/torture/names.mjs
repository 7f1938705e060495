// The actions the agents reach for. Names come in windows of a few seconds,
// a handful per window, so several agents race for each new one, and older
// ones come back as late duplicates that must replay.
import { createHash } from 'node:crypto';

const WINDOW_MS = 2000;
const PER_WINDOW = 6;

// A name for this moment: mostly from the current window, sometimes from
// one of the three before it.
export function pickName(rng, prefix, t0) {
  const now = Math.floor((Date.now() - t0) / WINDOW_MS);
  const window = rng.chance(0.7) ? now : Math.max(0, now - rng.int(1, 3));
  return `${prefix}-${window}-${rng.int(0, PER_WINDOW - 1)}`;
}

function hashByte(text, i = 0) {
  return createHash('sha256').update(text).digest()[i];
}

// fence_prepare's arguments for an intent; the same for every agent (the
// payload is the tool and its args), so duplicates replay, never mismatch.
export function fenceArgs(intent, agent) {
  return { intent, domain: `dom-${hashByte(intent) % 4}`, tool: 'effect', args: { n: intent }, agent };
}

// How long the wrapped child works on a key: a quarter of the keys take up
// to 2.5 s, longer than the shortest leases.
export function wrapMs(key) {
  const b = hashByte(key);
  return b < 64 ? b * 40 : b % 20;
}
