// Which RouteSource a router process reads, from its flags: a static list, or Temporal (the
// routes workflow, or visibility), verified against the control worker's key when one is given
// and held through Temporal's lapses (held.ts). Router side; main.ts asks for it once per
// process that talks to Temporal (the primary of a cluster, or the router itself).
import { HoldingRouteSource } from './held.js';
import { StaticRouteSource, type RouteSource, type StaticRoute } from './table.js';
import { VerifiedRouteSource } from './verify.js';
import { TemporalRouteSource } from './visibility.js';
import { WatchRouteSource } from './watch.js';

export interface RouteSourceChoice {
  /** --static-routes: serve these, ask nobody. */
  staticRoutes: StaticRoute[] | undefined;
  /** --routes: the routes workflow's long poll (watch), or visibility every half second. */
  routes: 'watch' | 'visibility';
  /** How the routes workflow knows this router (watch only). */
  routerId: string;
  /** --catalog-key, else LLMGW_CATALOG_PUBLIC_KEY_FILE or LLMGW_CATALOG_KEY_FILE: only signed routes are installed. */
  catalogKey: string | undefined;
  /** --insecure-routes with no key: routes from Temporal are installed unsigned. */
  insecureRoutes: boolean;
  /** --route-hold seconds a route Temporal forgot keeps serving while its engine answers; 0: never. */
  routeHoldS: number;
  /** Counts each call to Temporal (llmgw_router_temporal_requests_total). */
  onCall: (method: string) => void;
  /** The engines' key (--engine-key-file): a held route's health check carries it too. */
  engineKey?: string | undefined;
}

export function chooseRouteSource(choice: RouteSourceChoice, log: (line: string) => void): RouteSource {
  if (choice.staticRoutes) return new StaticRouteSource(choice.staticRoutes);
  // flags.ts refuses this already; a caller that skipped it must not get an unverified table quietly.
  if (choice.catalogKey === undefined && !choice.insecureRoutes)
    throw new Error('a route source from Temporal needs --catalog-key or --insecure-routes');
  const unverified =
    choice.routes === 'visibility'
      ? new TemporalRouteSource({ log, onCall: choice.onCall })
      : new WatchRouteSource({ log, onCall: choice.onCall, routerId: choice.routerId });
  if (choice.catalogKey === undefined)
    log(
      'router: WARNING --insecure-routes: routes and deployments are installed unsigned; anyone who can signal the routes workflow decides where traffic goes (/health says so)',
    );
  const temporal = choice.catalogKey === undefined ? unverified : new VerifiedRouteSource(unverified, choice.catalogKey, log);
  // Serving never stops because Temporal forgot a replica whose engine still answers.
  return choice.routeHoldS > 0
    ? new HoldingRouteSource(temporal, { log, maxHoldMs: choice.routeHoldS * 1000, engineKey: choice.engineKey })
    : temporal;
}
