// What `llmgw up` will open before it opens anything: every port (the defaults plus
// --port-offset), the two simulated agents, the state and log directories, the demo it
// deploys, and the catalog key pair the worker signs with. CLI side; up.ts starts from this.
import { existsSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { ensureCatalogKeyFile, publicKeyFileOf } from '../../common/catalog-key.js';
import { DEFAULT_PORTS } from '../../common/names.js';
import { upModel, type UpModel } from './up-model.js';

export interface UpOptions {
  catalog: string;
  routerPort: string;
  /** Default 2 for the demo, 1 for --real. */
  replicas?: string;
  /** Gemma 3 270M on llama.cpp instead of the fake engine's demo. */
  real?: boolean;
  /** Added to every port this stack opens (two stacks side by side, tests). */
  portOffset?: string;
  /** The simulated agents are `<prefix>-a` and `<prefix>-b`. */
  nodePrefix?: string;
}

export interface SimNode {
  nodeId: string;
  admin: number;
  metrics: number;
  /** Engine ports, FROM-TO. */
  ports: string;
}

export interface UpPlan {
  catalog: string;
  demo: UpModel;
  nodes: SimNode[];
  temporalPort: number;
  webUiPort: number;
  routerPort: number;
  /** The router's admin listener (/metrics, detailed /health): the port after the router's. */
  routerAdmin: number;
  workerMetrics: number;
  /** Ports the dev server must leave alone: every one promised above, and the engines' range. */
  reservedPorts(port: number): boolean;
  stateDir: string;
  logDir: string;
}

export function planStack(opts: UpOptions): UpPlan {
  const offset = Number(opts.portOffset ?? 0);
  if (!Number.isInteger(offset) || offset < 0 || offset > 40_000) throw new Error(`--port-offset ${opts.portOffset}: use 0-40000`);
  const port = (base: number): number => base + offset;
  const prefix = opts.nodePrefix ?? 'sim';
  const engines = port(DEFAULT_PORTS.enginesFrom);
  const nodes = ['a', 'b'].map((suffix, i) => ({
    nodeId: `${prefix}-${suffix}`,
    admin: port(DEFAULT_PORTS.agentAdmin) + i,
    metrics: port(DEFAULT_PORTS.agentMetrics) + i,
    ports: `${engines + 500 * i}-${engines + 500 * i + 499}`,
  }));
  const routerPort = Number(opts.routerPort) + offset;
  const workerMetrics = port(DEFAULT_PORTS.workerMetrics);
  // With an offset these land among the ports the OS hands out at random, which the dev server
  // takes for its HTTP and metrics endpoints: it must leave these to the parts they are for.
  const promised = new Set([routerPort, routerPort + 1, workerMetrics, ...nodes.flatMap((n) => [n.admin, n.metrics])]);
  const stateDir = resolve('.llmgw');
  return {
    catalog: opts.catalog,
    demo: upModel(opts.real === true, opts.replicas),
    nodes,
    temporalPort: port(DEFAULT_PORTS.temporal),
    webUiPort: port(DEFAULT_PORTS.webUi),
    routerPort,
    routerAdmin: routerPort + 1,
    workerMetrics,
    reservedPorts: (p) => promised.has(p) || (p >= engines && p <= engines + 999),
    stateDir,
    logDir: join(stateDir, 'logs'),
  };
}

/**
 * One catalog key for the worker and both agents (kept across runs, 0600), unless
 * LLMGW_CATALOG_KEY_FILE names one: the environment every part of the stack is started with,
 * the agents enrolling themselves with it.
 */
export function catalogKeyEnv(stateDir: string, say: (line: string) => void): Record<string, string> {
  const keyFile = process.env.LLMGW_CATALOG_KEY_FILE || join(stateDir, 'catalog.key');
  if (ensureCatalogKeyFile(keyFile))
    say(
      `created the catalog key pair ${keyFile} (0600, the worker signs with it) and ${publicKeyFileOf(keyFile)} (the agents and router verify)`,
    );
  // A legacy shared key (no .pub next to it) still serves everyone during the move to Ed25519.
  const publicFile = existsSync(publicKeyFileOf(keyFile)) ? publicKeyFileOf(keyFile) : keyFile;
  // The agents `up` starts run beside the worker, which holds the private key anyway: they enroll
  // their own keys with it (a production host is enrolled with `llmgw nodes enroll`).
  return { LLMGW_CATALOG_KEY_FILE: keyFile, LLMGW_CATALOG_PUBLIC_KEY_FILE: publicFile, LLMGW_AGENT_ENROLL_KEY_FILE: keyFile };
}
