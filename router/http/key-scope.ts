// What one API key may use: the models (served or deployment names) and LoRA adapters its entry
// in the keys file names, and the refusal of anything else. Router side; http/route.ts checks a
// request against it before the request can be held, wake a deployment or load an adapter, and
// http/core.ts lists in /v1/models only what it allows.

/** Names of one kind a key may use, or every one ('*' in its list). */
export type ScopeNames = ReadonlySet<string> | 'all';

/** A key's scope; a key without one may use every model and adapter. */
export interface KeyScope {
  /** Served names or deployment names (a deployment's name is an alias of its served name). */
  readonly models: ScopeNames;
  readonly adapters: ScopeNames;
}

/** What the scope check reads of a model (engines/model-pool.ts ModelPool). */
export interface ScopedModel {
  readonly servedName: string;
  readonly deployments: readonly string[];
}

/**
 * The scope a keys-file entry names, or undefined when it names neither list (every model, as
 * before scopes). Once one list is given, a list left out means none of that kind: a key given
 * `models` alone is refused adapters rather than handed all of them.
 */
export function scopeOf(models: readonly string[] | undefined, adapters: readonly string[] | undefined): KeyScope | undefined {
  if (models === undefined && adapters === undefined) return undefined;
  return { models: namesOf(models ?? []), adapters: namesOf(adapters ?? []) };
}

function namesOf(list: readonly string[]): ScopeNames {
  return list.includes('*') ? 'all' : new Set(list);
}

/** Whether the scope allows nothing at all (a keys-file mistake, refused at start). */
export function allowsNothing(scope: KeyScope): boolean {
  return scope.models !== 'all' && scope.models.size === 0 && scope.adapters !== 'all' && scope.adapters.size === 0;
}

/**
 * Whether a request for `model` may go on. A model is allowed when the scope names its served
 * name or one of the deployments behind it, whichever of those names the request used; an
 * adapter only by its own name (its base being allowed is not enough: adapters are tenants').
 */
export function allowsModel(scope: KeyScope, model: ScopedModel): boolean {
  if (scope.models === 'all') return true;
  if (scope.models.has(model.servedName)) return true;
  for (const d of model.deployments) if (scope.models.has(d)) return true;
  return false;
}

export function allowsAdapter(scope: KeyScope, name: string): boolean {
  return scope.adapters === 'all' || scope.adapters.has(name);
}

/** `models a, b; adapters x`: for a refusal, which the key's holder may read (it is their own scope). */
export function describeScope(scope: KeyScope): string {
  const list = (names: ScopeNames, kind: string) =>
    names === 'all' ? `every ${kind}` : names.size === 0 ? `no ${kind}` : `${kind}s ${[...names].sort().join(', ')}`;
  return `${list(scope.models, 'model')}; ${list(scope.adapters, 'adapter')}`;
}

/**
 * The 404 a scoped key gets for a model outside its scope. Worded as OpenAI words it, and the
 * same whether the model exists or not: a key must not learn which models other keys use.
 * Names the key by its id (or digest prefix), never by the key.
 */
export function outOfScopeMessage(keyId: string, scope: KeyScope, model: string): string {
  return `The model \`${model}\` does not exist or you do not have access to it. API key ${keyId} may use ${describeScope(scope)}.`;
}
