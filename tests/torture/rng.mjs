// A small seeded generator (mulberry32), so a seed names one schedule.
export function rng(seed) {
  let a = seed >>> 0;
  const next = () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  return {
    next,
    int: (lo, hi) => lo + Math.floor(next() * (hi - lo + 1)),  // lo..hi inclusive
    pick: (list) => list[Math.floor(next() * list.length)],
    chance: (p) => next() < p,
    // One entry of [[weight, value], ...], with probability weight / total.
    weighted(entries) {
      const total = entries.reduce((sum, [w]) => sum + w, 0);
      let x = next() * total;
      for (const [w, v] of entries) {
        if ((x -= w) < 0) return v;
      }
      return entries[entries.length - 1][1];
    },
  };
}
