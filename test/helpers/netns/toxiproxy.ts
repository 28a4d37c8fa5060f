// Toxiproxy between the namespaced agents and Temporal: latency and lost or reset connections,
// which this kernel cannot make itself (it has no netem qdisc). One proxy per host, so that a
// fault can hit one host's established connections (a gRPC client keeps one long connection,
// which a toxic decided when a connection opens would almost never touch). The pinned
// toxiproxy-server is built once per machine with `go install`, as the Temporal CLI is
// (temporal/go-install.ts).
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { goInstallIntoCache, llmgwCacheDir, type Log } from '../../../temporal/go-install.js';
import { findFreePort } from '../../../common/ports.js';

export const TOXIPROXY_VERSION = '2.5.0';

export async function ensureToxiproxy(log: Log = () => undefined): Promise<string> {
  const cacheDir = llmgwCacheDir(`toxiproxy-${TOXIPROXY_VERSION}`);
  const binary = join(cacheDir, 'toxiproxy-server');
  if (!existsSync(binary)) {
    await goInstallIntoCache(
      {
        what: `Toxiproxy ${TOXIPROXY_VERSION}`,
        packages: [`github.com/Shopify/toxiproxy/v2/cmd/server@v${TOXIPROXY_VERSION}`],
        cacheDir,
        binaries: { server: 'toxiproxy-server' },
        otherwise: `Or put a toxiproxy-server ${TOXIPROXY_VERSION} at ${binary}.`,
      },
      log,
    );
  }
  return binary;
}

export interface Toxic {
  type: 'latency' | 'reset_peer' | 'timeout' | 'limit_data';
  stream: 'upstream' | 'downstream';
  /**
   * The share of connections it applies to (0..1), drawn for each connection when it opens
   * and, for connections already open, when the toxic is added.
   */
  toxicity?: number;
  attributes: Record<string, number>;
}

/** One proxied path (one host's agent to Temporal). */
export interface ProxyPath {
  name: string;
  /** host:port the proxied client connects to. */
  listen: string;
  addToxics(toxics: Toxic[]): Promise<void>;
  clearToxics(): Promise<void>;
  /** Closes every connection open through it now (they are reopened by their clients). */
  closeConnections(): Promise<void>;
  /** Every byte either way vanishes for `ms`, on open connections and new ones; then they are closed. */
  blackhole(ms: number): Promise<void>;
}

export interface Toxiproxy {
  /** host:port of the first path, `temporal`. */
  listen: string;
  /** Another path to the same upstream, on a free port of the same host. */
  addPath(name: string): Promise<ProxyPath>;
  paths(): ProxyPath[];
  /** Adds the toxics to every path. */
  addToxics(toxics: Toxic[]): Promise<void>;
  clearToxics(): Promise<void>;
  stop(): Promise<void>;
}

/** A toxiproxy-server on `host` with one path (`temporal`) from a free port there to `upstream`. */
export async function startToxiproxy(host: string, upstream: string): Promise<Toxiproxy> {
  const binary = await ensureToxiproxy();
  const apiPort = await findFreePort();
  const child = spawn(binary, ['-host', host, '-port', String(apiPort)], { stdio: 'ignore', detached: true });
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const api = `http://${host}:${apiPort}`;
  const call = async (method: string, path: string, body?: unknown): Promise<Response> => {
    const response = await fetch(`${api}${path}`, {
      method,
      headers: { 'content-type': 'application/json' },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    });
    if (!response.ok && response.status !== 404)
      throw new Error(`toxiproxy ${method} ${path}: ${response.status} ${await response.text()}`);
    return response;
  };
  const stop = async (): Promise<void> => {
    try {
      process.kill(-child.pid!, 'SIGKILL');
    } catch {
      // Already gone.
    }
    await exited;
  };
  const deadline = Date.now() + 10_000;
  for (;;) {
    try {
      await call('GET', '/version');
      break;
    } catch (error) {
      if (Date.now() > deadline) {
        await stop();
        throw new Error(`toxiproxy-server did not answer on ${api}: ${String(error)}`, { cause: error });
      }
      await new Promise((r) => setTimeout(r, 100));
    }
  }

  let serial = 0;
  const paths: ProxyPath[] = [];
  const addPath = async (name: string): Promise<ProxyPath> => {
    const listen = `${host}:${await findFreePort()}`;
    await call('POST', '/proxies', { name, listen, upstream, enabled: true });
    let names: string[] = [];
    const add = async (toxics: Toxic[]): Promise<string[]> => {
      const added: string[] = [];
      for (const toxic of toxics) {
        const toxicName = `${toxic.type}-${toxic.stream}-${++serial}`;
        await call('POST', `/proxies/${name}/toxics`, {
          name: toxicName,
          type: toxic.type,
          stream: toxic.stream,
          toxicity: toxic.toxicity ?? 1,
          attributes: toxic.attributes,
        });
        added.push(toxicName);
      }
      return added;
    };
    const remove = async (toxicNames: string[]): Promise<void> => {
      for (const toxicName of toxicNames) await call('DELETE', `/proxies/${name}/toxics/${toxicName}`);
    };
    // Disabling a proxy closes every connection through it; enabling it listens again.
    const closeConnections = async (): Promise<void> => {
      await call('POST', `/proxies/${name}`, { enabled: false });
      await call('POST', `/proxies/${name}`, { enabled: true });
    };
    const path: ProxyPath = {
      name,
      listen,
      async addToxics(toxics) {
        names.push(...(await add(toxics)));
      },
      async clearToxics() {
        await remove(names);
        names = [];
      },
      closeConnections,
      async blackhole(ms) {
        // A timeout toxic with no timeout drops what it reads and never closes by itself.
        const hole = await add([
          { type: 'timeout', stream: 'upstream', attributes: { timeout: 0 } },
          { type: 'timeout', stream: 'downstream', attributes: { timeout: 0 } },
        ]);
        await new Promise((r) => setTimeout(r, ms));
        // Closed before the toxics go: what was dropped never reaches the other end half-way.
        await call('POST', `/proxies/${name}`, { enabled: false });
        await remove(hole);
        await call('POST', `/proxies/${name}`, { enabled: true });
      },
    };
    paths.push(path);
    return path;
  };

  try {
    const first = await addPath('temporal');
    return {
      listen: first.listen,
      addPath,
      paths: () => [...paths],
      async addToxics(toxics) {
        for (const path of paths) await path.addToxics(toxics);
      },
      async clearToxics() {
        for (const path of paths) await path.clearToxics();
      },
      stop,
    };
  } catch (error) {
    await stop();
    throw error;
  }
}

/** 200 ms each way (±20 ms), and 5 % of connections reset as they open (issue 27, point 4). */
export const SLOW_LOSSY_LINK: Toxic[] = [
  { type: 'latency', stream: 'upstream', attributes: { latency: 200, jitter: 20 } },
  { type: 'latency', stream: 'downstream', attributes: { latency: 200, jitter: 20 } },
  { type: 'reset_peer', stream: 'upstream', toxicity: 0.05, attributes: { timeout: 0 } },
];

/** With it, on connections already open: 5 % of 1 s windows, half closed at once, half dropped for 3 s. */
export const LOSSY_CONNECTIONS: ConnectionFaultOptions = { windowMs: 1_000, share: 0.05, dropMs: 3_000 };

export interface ConnectionFaultOptions {
  /** Each window, each path's open connections die with probability `share` (default 1 s). */
  windowMs?: number;
  /** Default 0.05. */
  share?: number;
  /** How long a dropped connection stays silent before it is closed (default 3 s). */
  dropMs?: number;
  /** For a repeatable run (default: Math.random). */
  random?: () => number;
}

export interface ConnectionFaultTally {
  windows: number;
  /** Windows in which a path's connections were closed at once. */
  resets: number;
  /** Windows in which a path's connections went silent, then were closed. */
  drops: number;
}

/**
 * Faults that reach established connections: time is cut into windows, and in each window each
 * path's open connections die with probability `share`: half of those times closed at once
 * (reset), half silently dropped (every byte vanishes for `dropMs`, then closed, as when a
 * middlebox loses the connection's state and the client waits until it notices). A path
 * already in a drop is left alone until it ends. stop() waits for drops in progress.
 */
export function startConnectionFaults(paths: ProxyPath[], options: ConnectionFaultOptions = {}): { stop(): Promise<ConnectionFaultTally> } {
  const windowMs = options.windowMs ?? 1_000;
  const share = options.share ?? 0.05;
  const dropMs = options.dropMs ?? 3_000;
  const random = options.random ?? Math.random;
  const tally: ConnectionFaultTally = { windows: 0, resets: 0, drops: 0 };
  const busy = new Set<string>();
  const pending = new Set<Promise<void>>();
  const track = (work: Promise<void>, path: ProxyPath): void => {
    busy.add(path.name);
    const done = work
      .catch(() => undefined)
      .finally(() => {
        busy.delete(path.name);
        pending.delete(done);
      });
    pending.add(done);
  };
  const timer = setInterval(() => {
    tally.windows++;
    for (const path of paths) {
      if (busy.has(path.name)) continue;
      const roll = random();
      if (roll >= share) continue;
      if (roll < share / 2) {
        tally.resets++;
        track(path.closeConnections(), path);
      } else {
        tally.drops++;
        track(path.blackhole(dropMs), path);
      }
    }
  }, windowMs);
  return {
    async stop() {
      clearInterval(timer);
      await Promise.all([...pending]);
      return tally;
    },
  };
}
