// Whether cache-aware routing (policies/cache-aware.ts) is on for a deployment, and the hash
// its keys (a session, a prompt's start) are made with. Router side.

/** FNV-1a over the first `limit` UTF-16 units, finished with murmur3's mixer for an even spread. */
export function hashText(text: string, limit = text.length): number {
  let h = 0x811c9dc5;
  const n = Math.min(limit, text.length);
  for (let i = 0; i < n; i++) {
    h ^= text.charCodeAt(i);
    h = Math.imul(h, 0x01000193);
  }
  h ^= h >>> 16;
  h = Math.imul(h, 0x85ebca6b);
  h ^= h >>> 13;
  h = Math.imul(h, 0xc2b2ae35);
  h ^= h >>> 16;
  return h >>> 0;
}

/** Whether cache-aware routing is on, for all deployments and for some by name. */
export interface AffinitySettings {
  /** For every deployment not named: on by default. */
  enabled: boolean;
  /** Deployment or served name → on or off. */
  byName: ReadonlyMap<string, boolean>;
}

export const AFFINITY_ON: AffinitySettings = { enabled: true, byName: new Map() };

/**
 * `on`, `off`, `NAME:on`, `NAME:off`, comma-separated (--affinity or LLMGW_ROUTER_AFFINITY):
 * `off,chat:on` turns it off everywhere but for chat. Throws naming the part that is wrong.
 */
export function parseAffinity(spec: string | undefined): AffinitySettings {
  let enabled = true;
  const byName = new Map<string, boolean>();
  if (!spec) return { enabled, byName };
  for (const raw of spec.split(',')) {
    const part = raw.trim();
    if (part === '') continue;
    const colon = part.lastIndexOf(':');
    const name = colon < 0 ? '' : part.slice(0, colon).trim();
    const mode = (colon < 0 ? part : part.slice(colon + 1)).trim();
    if (mode !== 'on' && mode !== 'off') throw new Error(`affinity "${part}" must be on, off, NAME:on or NAME:off`);
    if (colon < 0) enabled = mode === 'on';
    else if (name === '') throw new Error(`affinity "${part}" names no deployment`);
    else byName.set(name, mode === 'on');
  }
  return { enabled, byName };
}
