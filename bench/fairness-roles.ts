// The processes of `npm run bench:fairness` (bench/fairness.ts) and how the benchmark drives
// them: a fake engine, a router with a keys file of tenants and given flow-control settings, and
// the load generator (bench/fairness-load.ts), each its own process so that on a small machine
// the sender competes for a core instead of running inside the router it measures. A Deployment
// is one fresh engine and router, so phases do not leak into each other.
import type { ChildProcess } from 'node:child_process';
import { fakeEngineOptions } from '../fake-engine/options.js';
import { startFakeEngine } from '../fake-engine/server.js';
import { loadApiKeys } from '../router/http/auth.js';
import { startRouter } from '../router/http/server.js';
import type { QueueSettings } from '../router/flow/waiting-room.js';
import { StaticRouteSource } from '../router/routes/table.js';
import { forkRole, readyOf, stopChild } from './cli.js';
import { runLoad, type LoadJob, type StreamResult } from './fairness-load.js';

export const MODEL = 'bench-fair';

/** The saturated deployment: one engine with this many slots, this decode and prefill speed. */
export interface EngineShape {
  slots: number;
  tokensPerSecond: number;
  prefillTokensPerSecond: number;
}

type Ready = { port: number; adminPort?: number };
type FromChild = { ready: Ready } | { results: StreamResult[] };

/** In a child: plays `name` with `args`. */
export function fairnessRole(name: string, args: string[]): void {
  const say = (m: FromChild) => process.send?.(m);
  if (name === 'engine') {
    const shape = JSON.parse(args[0] ?? '{}') as EngineShape;
    void startFakeEngine(
      fakeEngineOptions({
        model: MODEL,
        maxConcurrency: shape.slots,
        tokensPerSecond: shape.tokensPerSecond,
        prefillTokensPerSecond: shape.prefillTokensPerSecond,
      }),
    ).then((e) => say({ ready: { port: e.port } }));
  } else if (name === 'router') {
    const [engineUrl = '', keysFile = '', queueJson = '{}'] = args;
    const queue = JSON.parse(queueJson) as Partial<QueueSettings>;
    void startRouter({
      source: new StaticRouteSource([{ servedName: MODEL, endpoint: engineUrl }]),
      port: 0,
      host: '127.0.0.1',
      admin: { host: '127.0.0.1', port: 0 },
      apiKeys: loadApiKeys({ file: keysFile, env: {} }),
      scrapeIntervalMs: 200,
      queue,
      log: () => undefined,
    }).then((r) => say({ ready: { port: r.port, adminPort: r.adminPort } }));
  } else if (name === 'load') {
    process.on('message', (job: LoadJob) => {
      void runLoad(job).then((results) => say({ results }));
    });
    say({ ready: { port: 0 } });
  }
}

/** The load generator process, kept for the whole run. */
export class Loader {
  private constructor(private readonly child: ChildProcess) {}

  static async start(file: string): Promise<Loader> {
    const { child, ready } = forkRole<FromChild>(file, ['load']);
    readyOf(await ready);
    return new Loader(child);
  }

  run(job: LoadJob): Promise<StreamResult[]> {
    return new Promise((resolve) => {
      const onMessage = (m: FromChild) => {
        if (!('results' in m)) return;
        this.child.off('message', onMessage);
        resolve(m.results);
      };
      this.child.on('message', onMessage);
      this.child.send(job);
    });
  }

  stop(): Promise<void> {
    return stopChild(this.child);
  }
}

/** One fresh engine and router with the given flow-control settings. */
export class Deployment {
  private constructor(
    private readonly children: ChildProcess[],
    readonly base: string,
    readonly admin: string,
  ) {}

  static async start(file: string, shape: EngineShape, keysFile: string, queue: Partial<QueueSettings>): Promise<Deployment> {
    const engine = forkRole<FromChild>(file, ['engine', JSON.stringify(shape)]);
    const e = readyOf(await engine.ready);
    const router = forkRole<FromChild>(file, ['router', `http://127.0.0.1:${e.port}`, keysFile, JSON.stringify(queue)]);
    const r = readyOf(await router.ready);
    return new Deployment([engine.child, router.child], `http://127.0.0.1:${r.port}`, `http://127.0.0.1:${r.adminPort ?? 0}`);
  }

  /**
   * The router learns an engine's slots from a scrape that shows a line there, so the engine is
   * first pushed past them (by one tenant, closed loop), then left to empty.
   */
  async warm(loader: Loader, key: string, shape: EngineShape, maxTokens: number): Promise<void> {
    await loader.run({
      base: this.base,
      model: MODEL,
      durationMs: 1500,
      drainMs: 5000,
      streams: [{ name: 'warm', key, connections: shape.slots * 3, maxTokens }],
    });
    await new Promise((resolve) => setTimeout(resolve, 300));
  }

  /** The router's /metrics (admin listener). */
  async metrics(): Promise<string> {
    return (await fetch(`${this.admin}/metrics`)).text();
  }

  stop(): Promise<void> {
    return Promise.all(this.children.map((c) => stopChild(c))).then(() => undefined);
  }
}
