// The routing policies by name: what the router builds for a model's pool. Each policy is one
// file in this folder behind RoutingPolicy (policy.ts); adding one is a file and a line here.
import type { Endpoint } from '../engines/endpoint.js';
import type { AffinityTable } from './affinity-table.js';
import { cacheAware } from './cache-aware.js';
import { leastLoaded } from './least-loaded.js';
import type { AffinityResult, PolicyName, RoutingPolicy } from './policy.js';
import { roundRobin } from './round-robin.js';

export interface PolicyNeeds {
  /** The model's affinity memory, which outlives table changes (cache-aware only). */
  table: () => AffinityTable<Endpoint>;
  /** Counts what a cache-aware pick did. */
  counted: (result: AffinityResult) => void;
}

export function createPolicy(name: PolicyName, needs: PolicyNeeds): RoutingPolicy<Endpoint> {
  switch (name) {
    case 'cache-aware':
      return cacheAware(needs.table(), needs.counted);
    case 'least-loaded':
      return leastLoaded();
    case 'round-robin':
      return roundRobin();
  }
}

export { POLICY_NAMES, type PolicyName, type PickRequest, type RoutingPolicy } from './policy.js';
