// The router's /v1/models answers: the list (routable models and the adapters of those with a
// replica, only what a scoped key may use) and one model's card. Router side; http/core.ts
// dispatches to it.
import type { ServerResponse } from 'node:http';
import type { AdapterRouter } from '../adapters/router.js';
import type { RoutingState } from '../engines/pools.js';
import type { ApiKey } from './auth.js';
import { sendError } from './errors.js';
import { allowsAdapter, allowsModel, outOfScopeMessage, type KeyScope } from './key-scope.js';
import { sendJson } from './request.js';

/**
 * The /v1/models body: the routable models, and the adapters of those with a replica (with
 * `parent`); for a scoped key only those it may use.
 */
export function modelsBody(state: RoutingState, adapters: AdapterRouter | undefined, scope: KeyScope | undefined): string {
  const base = state.modelsBody();
  const cards = adapters?.modelCards(Math.floor(Date.now() / 1000)) ?? [];
  if (scope === undefined && cards.length === 0) return base;
  const parsed = JSON.parse(base) as { object: string; data: Array<{ id: string }> };
  if (scope === undefined) return JSON.stringify({ object: parsed.object, data: [...parsed.data, ...cards] });
  const models = parsed.data.filter((card) => {
    const pool = state.lookup(card.id);
    return pool !== undefined && allowsModel(scope, pool);
  });
  const allowed = (cards as Array<{ id: string }>).filter((card) => allowsAdapter(scope, card.id));
  return JSON.stringify({ object: parsed.object, data: [...models, ...allowed] });
}

/** One model's (or adapter's) card; 404 for what does not exist or a scoped key may not use. */
export function oneModel(
  state: RoutingState,
  adapters: AdapterRouter | undefined,
  res: ServerResponse,
  name: string,
  key: ApiKey | undefined,
): void {
  const pool = state.lookup(name);
  const adapter = pool === undefined ? adapters?.resolve(name) : undefined;
  const scope = key?.scope;
  if (key !== undefined && scope !== undefined) {
    const allowed = pool !== undefined ? allowsModel(scope, pool) : adapter !== undefined && allowsAdapter(scope, adapter.spec.name);
    if (!allowed) return sendError(res, 'unknown_model', outOfScopeMessage(key.id, scope, name));
  }
  if (adapter !== undefined && adapter.base.endpoints.length > 0) {
    const card = {
      id: name,
      object: 'model',
      created: Math.floor(Date.now() / 1000),
      owned_by: 'llmgw',
      root: adapter.spec.source,
      parent: adapter.base.servedName,
    };
    return sendJson(res, 200, JSON.stringify(card));
  }
  // An autoscaled model at zero is still served: its first request wakes it.
  if (!pool || (pool.endpoints.length === 0 && !pool.holds))
    return sendError(res, 'unknown_model', `The model \`${name}\` does not exist or has no ready replica.`);
  sendJson(res, 200, JSON.stringify({ id: pool.servedName, object: 'model', created: Math.floor(Date.now() / 1000), owned_by: 'llmgw' }));
}
