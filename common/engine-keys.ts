// Engine keys per replica run: what an engine requires on /v1/* is not the fleet's engine key
// (--engine-key-file) but a key derived from it for the replica run chain its placement ticket
// names, so one tenant's engine, which reads its own key, can call no other engine. Both sides
// derive it: the agent when it spawns the engine (agent/supervisor/start/start.ts), the router
// from the signed route's chain (router/engines/upstream.ts). Derived, never carried: a secret
// may not enter a Temporal payload, and tickets and routes live in workflow state.
import { createHmac } from 'node:crypto';

/** Binds the MAC to this use: the fleet key signs nothing else with this prefix. */
const LABEL = 'llmgw engine key v1\n';

/** Marks a derived key (base64url after it: bearer-safe, and safe in SGLang's YAML and any env). */
const PREFIX = 'llmgw-ek1-';

/**
 * The key of the engines of run chain `chain`: HMAC-SHA256(fleet key, label + chain). Without a
 * chain (an engine placed before tickets, or by a control plane with no catalog key: nothing
 * names its run), the fleet key itself, which such engines were and are started with.
 */
export function engineKeyFor(fleetKey: string, chain: string | undefined): string {
  if (chain === undefined || chain === '') return fleetKey;
  return (
    PREFIX +
    createHmac('sha256', fleetKey)
      .update(LABEL + chain)
      .digest('base64url')
  );
}

/**
 * The chain an engine's key is derived from, as a ticket or route states it: `keyChain` when the
 * engine was started by an earlier chain of its replica (a replica rebuilt around running
 * engines), else `chain`; undefined when it names none (the fleet key).
 */
export function keyChainOf(named: { chain?: string | undefined; keyChain?: string | undefined }): string | undefined {
  return named.keyChain || named.chain || undefined;
}
