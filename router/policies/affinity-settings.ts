// Whether cache-aware routing (policies/cache-aware.ts) is on for a deployment: --affinity and
// LLMGW_ROUTER_AFFINITY parsed. Router side; the keys it homes requests by are hashed in kv/hashing.ts.

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
