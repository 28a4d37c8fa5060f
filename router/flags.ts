// `llmgw router`'s flags as commander hands them over, and their check: each flag's type and
// range (zod), the settings parsed from strings (affinity, static routes, the admin listener,
// API keys), the refusal to serve a reachable address open, and the refusal to install routes
// from Temporal that nobody signed. Router side; main.ts runs what this returns.
import { z } from 'zod';
import { readEngineKey } from '../agent/engine-identity.js';
import { DEFAULT_PORTS } from '../common/names.js';
import { AdminAddr, adminListener, type AdminListen } from './http/admin-addr.js';
import { loadApiKeys, type ApiKeys } from './http/auth.js';
import { DEFAULT_HELD_BYTES } from './http/byte-budget.js';
import { DEFAULT_KEY_CONCURRENCY } from './http/limits.js';
import { DEFAULT_BODY_LIMIT } from './options.js';
import { DEFAULT_QUEUE, type QueueSettings } from './flow/waiting-room.js';
import { DEFAULT_MAX_FILE_BYTES } from '../batches/file-store.js';
import { DEFAULT_UPSTREAM } from './engines/upstream.js';
import { parseAffinity, type AffinitySettings } from './policies/affinity-settings.js';
import { DEFAULT_GUARD } from './policies/affinity-table.js';
import { DEFAULT_HOLD } from './routes/held.js';
import { parseStaticRoutes, type StaticRoute } from './routes/table.js';

/** The flags of `llmgw router` as commander hands them over (strings, as typed). */
export interface RouterFlags {
  /** --port, default 8080. */
  port?: string | number;
  /** --host, default 0.0.0.0: clients reach the router from elsewhere. */
  host?: string;
  /** --api-keys-file: one key per line, plain or a JSON entry with its scope (http/auth.ts); LLMGW_API_KEYS adds more. */
  apiKeysFile?: string;
  /** --affinity `on|off|NAME:on|NAME:off,...` (cache-aware routing, on by default); defaults to LLMGW_ROUTER_AFFINITY. */
  affinity?: string;
  /** --kv-events `off|PORT|+OFFSET`: follow engines' KV-cache events; defaults to LLMGW_ROUTER_KV_EVENTS. */
  kvEvents?: string;
  /** --catalog FILE: the LoRA adapters each base may load (re-read on change); defaults to LLMGW_CATALOG. */
  catalog?: string;
  /** --affinity-abs-gap: in-flight requests a home may hold beyond the least-loaded replica. */
  affinityAbsGap?: string | number;
  /** --affinity-rel-gap: how many times the least-loaded replica's load a home may hold. */
  affinityRelGap?: string | number;
  /** --static-routes `name=http://host:port,...`: serve these instead of asking Temporal. */
  staticRoutes?: string;
  /** --body-limit bytes, default 8 MiB. */
  bodyLimit?: string | number;
  /** --shutdown-grace seconds for in-flight requests on SIGTERM, default 30. */
  shutdownGrace?: string | number;
  /** --workers N router processes on the one port (node:cluster), default 1. */
  workers?: string | number;
  /** --routes watch (the routes workflow, default) or visibility (list replicas every half second, as before). */
  routes?: string;
  /** --allow-unauthenticated: serve a non-loopback address with no API key configured. */
  allowUnauthenticated?: boolean;
  /** --key-rps: each key's requests per second unless its line sets one. */
  keyRps?: string | number;
  /** --key-concurrency: each key's requests in flight unless its line sets one. */
  keyConcurrency?: string | number;
  /** --queue-size: requests held per deployment (at zero, starting, or saturated), default 1000. */
  queueSize?: string | number;
  /** --queue-timeout seconds a held request may wait, default 300. */
  queueTimeout?: string | number;
  /** --saturated-waiting N|off: an engine with N requests waiting takes no more from this router, default 8. */
  saturatedWaiting?: string | number;
  /** --fairness weighted|fifo: how one priority's held requests share the line, default weighted (by tenant). */
  fairness?: string;
  /** --kept-slots FRACTION: the share of each engine's slots kept, while contended, for critical requests and tenants below their share. */
  keptSlots?: string | number;
  /** --autoscale on|off: this router scales deployments and wakes them (on by default). */
  autoscale?: string;
  /** --router-id: how the routes workflow knows this router; default HOST:PORT, so a restart replaces itself. */
  routerId?: string;
  /** --route-hold seconds a route Temporal forgot keeps serving while its engine answers (routes/held.ts); 0: never. */
  routeHold?: string | number;
  /** --admin-addr unix|unix:PATH|HOST:PORT|off: /metrics and the detailed /health; default a 0600 Unix socket (http/admin-addr.ts). */
  adminAddr?: string;
  /** --debug-headers: name the engine that answered in x-llmgw-endpoint. */
  debugHeaders?: boolean;
  /** --held-bytes: request bodies held in memory at once, default 256 MiB. */
  heldBytes?: string | number;
  /** --upstream-idle-timeout seconds an engine may send nothing, default 600; 0: no limit. */
  upstreamIdleTimeout?: string | number;
  /** --catalog-key: the control worker's public keys; only routes it signed are installed. */
  catalogKey?: string;
  /** --insecure-routes: with no --catalog-key, install routes from Temporal unsigned (said in the log and /health). */
  insecureRoutes?: boolean;
  /** --engine-key-file: the API key engines require (the agents' --engine-key-file). */
  engineKeyFile?: string;
  /** --files-dir DIR: the Files API's files on local disk (batches/file-store.ts). */
  filesDir?: string;
  /** --files-s3 s3://BUCKET/PREFIX: the Files API's files in a bucket, with the weights' S3 environment. */
  filesS3?: string;
  /** --files-max-bytes: the largest file accepted, default 200 MB. */
  filesMaxBytes?: string | number;
}

const Flags = z.object({
  port: z.coerce.number().int().min(0).max(65535).default(DEFAULT_PORTS.router),
  host: z.string().min(1).default('0.0.0.0'),
  apiKeysFile: z.string().min(1).optional(),
  affinity: z.string().optional(),
  kvEvents: z.string().optional(),
  catalog: z.string().min(1).optional(),
  staticRoutes: z.string().optional(),
  bodyLimit: z.coerce.number().int().min(1024).default(DEFAULT_BODY_LIMIT),
  shutdownGrace: z.coerce.number().min(0).default(30),
  workers: z.coerce.number().int().min(1).max(64).default(1),
  allowUnauthenticated: z.boolean().default(false),
  routes: z.enum(['watch', 'visibility']).default('watch'),
  keyRps: z.coerce.number().positive().optional(),
  keyConcurrency: z
    .union([z.literal('off'), z.coerce.number().int().positive()], { error: 'must be a whole number > 0 or off' })
    .default(DEFAULT_KEY_CONCURRENCY),
  affinityAbsGap: z.coerce.number().min(0).default(DEFAULT_GUARD.absGap),
  affinityRelGap: z.coerce.number().min(1).default(DEFAULT_GUARD.relGap),
  queueSize: z.coerce.number().int().min(0).default(DEFAULT_QUEUE.maxPerModel),
  queueTimeout: z.coerce
    .number()
    .positive()
    .default(DEFAULT_QUEUE.maxWaitMs / 1000),
  saturatedWaiting: z
    .union([z.literal('off'), z.coerce.number().int().min(0)], { error: 'must be a whole number ≥ 0 or off' })
    .default(DEFAULT_QUEUE.saturatedWaiting ?? 'off'),
  fairness: z.enum(['weighted', 'fifo'], { error: 'must be weighted or fifo' }).default(DEFAULT_QUEUE.fairness),
  keptSlots: z.coerce
    .number({ error: 'must be a number from 0 to 0.5' })
    .min(0, 'must be a number from 0 to 0.5')
    .max(0.5, 'must be a number from 0 to 0.5')
    .default(DEFAULT_QUEUE.keptShare),
  autoscale: z.enum(['on', 'off']).default('on'),
  routerId: z.string().min(1).optional(),
  routeHold: z.coerce
    .number()
    .min(0)
    .default(DEFAULT_HOLD.maxHoldMs / 1000),
  adminAddr: AdminAddr.optional(),
  debugHeaders: z.boolean().default(false),
  heldBytes: z.coerce.number().int().min(1024).default(DEFAULT_HELD_BYTES),
  upstreamIdleTimeout: z.coerce
    .number()
    .min(0)
    .default(DEFAULT_UPSTREAM.idleTimeoutMs / 1000),
  catalogKey: z.string().min(1).optional(),
  insecureRoutes: z.boolean().default(false),
  engineKeyFile: z.string().min(1).optional(),
  filesDir: z.string().min(1).optional(),
  filesS3: z.string().startsWith('s3://', 'must be s3://BUCKET/PREFIX').optional(),
  filesMaxBytes: z.coerce.number().int().min(1).default(DEFAULT_MAX_FILE_BYTES),
});

/** True for an address only this machine can reach. */
export function isLoopback(host: string): boolean {
  return host === 'localhost' || host === '::1' || host === '[::1]' || /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(host);
}

export class RouterFlagsError extends Error {
  override name = 'RouterFlagsError';
}

/** The flags checked, and what was parsed from them and from the environment. */
export interface RouterSettings {
  flags: z.infer<typeof Flags>;
  affinity: AffinitySettings;
  staticRoutes: StaticRoute[] | undefined;
  admin: AdminListen | undefined;
  apiKeys: ApiKeys | undefined;
  /** Reads --api-keys-file and LLMGW_API_KEYS again (http/key-reload.ts); undefined without a keys file. */
  reloadApiKeys: (() => ApiKeys | undefined) | undefined;
  /** This process's share of each deployment's waiting line (a --workers cluster splits it). */
  queue: QueueSettings;
  /** --catalog, else LLMGW_CATALOG: the adapters each base may load. */
  catalogPath: string | undefined;
  kvEvents: string | undefined;
  /** --catalog-key, else LLMGW_CATALOG_PUBLIC_KEY_FILE or LLMGW_CATALOG_KEY_FILE; undefined with static routes. */
  catalogKey: string | undefined;
  /** Routes from Temporal are installed unsigned (--insecure-routes and no key): said in the log and /health. */
  insecureRoutes: boolean;
  /** --engine-key-file's key: sent on every call the router makes to an engine. */
  engineKey: string | undefined;
}

/** What a router with no key is told when it refuses to start: what to pass, and what the other choice costs. */
export const NO_CATALOG_KEY =
  "no --catalog-key: pass the control worker's public key file (--catalog-key FILE, or LLMGW_CATALOG_PUBLIC_KEY_FILE) " +
  'so that only routes it signed are installed, or --insecure-routes to install whatever the routes workflow holds ' +
  '(anyone who can signal it in the namespace then decides where traffic goes)';

/** Checks the flags; throws RouterFlagsError naming the flag (or the refusal) on anything wrong. */
export function parseRouterFlags(flags: RouterFlags, env: NodeJS.ProcessEnv): RouterSettings {
  const parsed = Flags.safeParse(flags);
  if (!parsed.success) {
    throw new RouterFlagsError(
      parsed.error.issues.map((i) => `--${i.path.join('.').replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`)}: ${i.message}`).join('; '),
    );
  }
  const f = parsed.data;
  if (f.filesDir !== undefined && f.filesS3 !== undefined)
    throw new RouterFlagsError('--files-dir and --files-s3: give one place for files, not both');
  let parts: Pick<RouterSettings, 'affinity' | 'staticRoutes' | 'admin' | 'apiKeys' | 'engineKey' | 'reloadApiKeys'>;
  try {
    const concurrent = f.keyConcurrency === 'off' ? undefined : f.keyConcurrency;
    const readKeys = () => loadApiKeys({ file: f.apiKeysFile, env, defaults: { rps: f.keyRps, concurrent } });
    parts = {
      reloadApiKeys: f.apiKeysFile === undefined ? undefined : readKeys,
      admin: adminListener(f.adminAddr, f.port, env),
      affinity: parseAffinity(f.affinity ?? env.LLMGW_ROUTER_AFFINITY),
      staticRoutes: f.staticRoutes ? parseStaticRoutes(f.staticRoutes) : undefined,
      apiKeys: readKeys(),
      engineKey: f.engineKeyFile === undefined ? undefined : readEngineKey(f.engineKeyFile),
    };
  } catch (err) {
    throw new RouterFlagsError((err as Error).message);
  }
  // An open router on a reachable address is somebody's free GPU cluster: refuse unless asked.
  if (parts.apiKeys === undefined && !isLoopback(f.host) && !f.allowUnauthenticated) {
    throw new RouterFlagsError(
      `refusing to serve ${f.host} without API keys: configure keys (--api-keys-file or LLMGW_API_KEYS), ` +
        'bind a loopback address (--host 127.0.0.1), or pass --allow-unauthenticated to serve it open',
    );
  }
  // Routes from Temporal are whatever anyone in the namespace signalled, unless signed: a router
  // without the key to check them does not start unless told to run that way. Static routes come
  // from this command line, which is the operator's word already: they need no key.
  const catalogKey = parts.staticRoutes
    ? undefined
    : (f.catalogKey ?? (env.LLMGW_CATALOG_PUBLIC_KEY_FILE || env.LLMGW_CATALOG_KEY_FILE || undefined));
  if (!parts.staticRoutes && catalogKey === undefined && !f.insecureRoutes)
    throw new RouterFlagsError(`refusing to start: ${NO_CATALOG_KEY}`);
  return {
    flags: f,
    ...parts,
    catalogKey,
    insecureRoutes: !parts.staticRoutes && catalogKey === undefined,
    // Each process of a cluster holds its share of every deployment's line, as of every key limit.
    queue: {
      maxPerModel: Math.ceil(f.queueSize / f.workers),
      maxWaitMs: f.queueTimeout * 1000,
      saturatedWaiting: f.saturatedWaiting === 'off' ? undefined : f.saturatedWaiting,
      fairness: f.fairness,
      keptShare: f.keptSlots,
    },
    catalogPath: f.catalog ?? env.LLMGW_CATALOG,
    kvEvents: f.kvEvents ?? env.LLMGW_ROUTER_KV_EVENTS,
  };
}
