// Toxiproxy between the namespaced agents and Temporal: latency and lost or reset connections,
// which this kernel cannot make itself (it has no netem qdisc). The pinned toxiproxy-server is
// built once per machine with `go install`, as the Temporal CLI is (temporal/go-install.ts).
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
  type: 'latency' | 'reset_peer' | 'timeout';
  stream: 'upstream' | 'downstream';
  /** The share of connections it applies to (0..1). */
  toxicity?: number;
  attributes: Record<string, number>;
}

export interface Toxiproxy {
  /** host:port the proxied clients connect to. */
  listen: string;
  addToxics(toxics: Toxic[]): Promise<void>;
  clearToxics(): Promise<void>;
  stop(): Promise<void>;
}

/** A toxiproxy-server on `host` with one proxy from a free port there to `upstream`. */
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
  const listen = `${host}:${await findFreePort()}`;
  await call('POST', '/proxies', { name: 'temporal', listen, upstream, enabled: true });
  let names: string[] = [];
  return {
    listen,
    async addToxics(toxics) {
      for (const [i, toxic] of toxics.entries()) {
        const name = `${toxic.type}-${toxic.stream}-${i}`;
        await call('POST', '/proxies/temporal/toxics', {
          name,
          type: toxic.type,
          stream: toxic.stream,
          toxicity: toxic.toxicity ?? 1,
          attributes: toxic.attributes,
        });
        names.push(name);
      }
    },
    async clearToxics() {
      for (const name of names) await call('DELETE', `/proxies/temporal/toxics/${name}`);
      names = [];
    },
    stop,
  };
}
