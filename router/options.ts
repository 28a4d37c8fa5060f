// What startRouter takes: the route source, the listeners, the limits and budgets, and the hooks
// the process around it (main.ts, a test, a bench) plugs in. Router side.
import type { Registry } from 'prom-client';
import type { ImbalanceGuard } from './policies/affinity-table.js';
import type { ApiKeys } from './http/auth.js';
import type { AdminListen } from './http/admin-addr.js';
import type { AffinitySettings } from './policies/affinity-settings.js';
import type { AdapterCatalog } from './adapters/catalog.js';
import type { AdapterRouterOptions } from './adapters/placement.js';
import type { PolicyName } from './policies/policy.js';
import type { RouteSnapshot, RouteSource } from './routes/table.js';
import type { QueueSettings } from './flow/waiting-room.js';
import type { WakeCaller } from './engines/wake.js';
import type { FilesSettings } from '../batches/files-api.js';

export interface RouterOptions {
  source: RouteSource;
  /** 0 asks the OS for a port. Default 8080. */
  port?: number;
  host?: string;
  /** Undefined: no authentication. */
  apiKeys?: ApiKeys | undefined;
  /** The share of each key's limits this process enforces: 1 / router processes. Default 1. */
  limitShare?: number;
  /** Cache-aware routing on or off, for all deployments and by name; on by default. */
  affinity?: AffinitySettings;
  /** When cache-aware routing moves a request off its home replica. */
  guard?: ImbalanceGuard;
  /** One policy for every model, whatever `affinity` says (bench:affinity compares them). */
  policy?: PolicyName;
  /** Where engines publish KV-cache events: `off` (default), `PORT` or `+OFFSET` from the HTTP port (kv/events.ts). */
  kvEvents?: string | ((url: string) => string | undefined);
  bodyLimitBytes?: number;
  /** Request bodies this process holds in memory at once (being read, waiting, in flight); default 256 MiB. */
  heldBytes?: number;
  /** Name the engine that answered in `x-llmgw-endpoint` (off by default: clients must not learn engines' addresses). */
  debugHeaders?: boolean;
  /** The API key engines require (--engine-key-file): sent as `Authorization: Bearer` to every engine. */
  engineKey?: string;
  /** Routes are installed unsigned (--insecure-routes): both /health answers say so. */
  insecureRoutes?: boolean;
  /** Where /metrics and the detailed /health are served (a socket, or TCP: port 0 asks the OS); undefined: nowhere. */
  admin?: AdminListen;
  /** How often to read the route source. */
  routesIntervalMs?: number;
  scrapeIntervalMs?: number;
  connectTimeoutMs?: number;
  /** Silence from an engine (no header or body bytes) after which its request fails; see engines/upstream.ts. */
  upstreamIdleTimeoutMs?: number;
  /** Tries per request, the first included. */
  maxAttempts?: number;
  /** Process metrics (CPU, memory, event loop lag) in /metrics; on for the CLI, off in tests. */
  processMetrics?: boolean;
  /** What /metrics answers instead of this router's own registry (a cluster worker: all workers' sum). */
  metricsText?: () => Promise<string>;
  /** More metrics for /metrics beside the router's own (its route source's Temporal calls). */
  extraMetrics?: Registry;
  /** The waiting line's limits per deployment, and flow control's threshold. */
  queue?: Partial<QueueSettings>;
  /** Requests are held for a model with no routable replica: wake its deployment (the autoscaler). */
  onHold?: (model: string) => void;
  /**
   * Wakes a sleeping replica (the `wakeReplica` Update; in a cluster worker, through the primary).
   * Undefined (static routes, no Temporal): a model whose replicas all sleep is answered 503 at once.
   */
  wakeReplica?: WakeCaller;
  /** Who this router is, in the wakes it asks (`router:<routerId>`); default host/pid. */
  routerId?: string;
  /** Hears every table installed (the autoscaler reads desired counts and bounds from it). */
  onTable?: (snapshot: RouteSnapshot) => void;
  log?: (line: string) => void;
  /** LoRA adapters the router may load, by base model (the catalog's, through --catalog); undefined: none. */
  adapters?: AdapterCatalog;
  adapterRouting?: Partial<AdapterRouterOptions>;
  /** The Files API's store and limit (--files-dir, --files-s3); undefined: /v1/files answers 404 naming the flags. */
  files?: FilesSettings;
  /**
   * The Temporal client /v1/batches starts and reads batch workflows with (routes from Temporal,
   * one router process); undefined, or without `files`: /v1/batches answers 404 naming what to set.
   */
  batches?: Omit<import('../batches/batches-api.js').BatchesSettings, 'store'>;
}

export const DEFAULT_BODY_LIMIT = 8 * 1024 * 1024;
