// Routes in a --workers cluster: only the primary talks to Temporal. It reads the route source
// and sends every new table to every worker over IPC, waiting (briefly) for each to say it has
// installed it before it acknowledges the version to the routes workflow; workers read their
// tables from the primary as a long-polling RouteSource. So N workers cost Temporal what one
// router does, and a table reaches every worker within a few milliseconds of the primary.
// Router side.
import cluster, { type Worker } from 'node:cluster';
import { RouteRefresher, type SourceState } from './refresher.js';
import type { RouteSnapshot, RouteSource } from './table.js';

const ROUTES = 'llmgw-router:routes';
const INSTALLED = 'llmgw-router:installed';
const HELLO = 'llmgw-router:hello';
/** How long the primary waits for workers to install a table before it acknowledges it anyway. */
const ACK_WAIT_MS = 1_000;
const RETRY_MS = 1_000;

type RoutesMessage =
  | { type: typeof ROUTES; seq: number; source: string; snapshot: RouteSnapshot }
  | { type: typeof ROUTES; seq: number; source: string; error: string };
type InstalledMessage = { type: typeof INSTALLED; seq: number };

function isRoutesMessage(m: unknown): m is RoutesMessage {
  return typeof m === 'object' && m !== null && (m as { type?: unknown }).type === ROUTES;
}
function isInstalledMessage(m: unknown): m is InstalledMessage {
  return typeof m === 'object' && m !== null && (m as { type?: unknown }).type === INSTALLED;
}
function isHello(m: unknown): boolean {
  return typeof m === 'object' && m !== null && (m as { type?: unknown }).type === HELLO;
}

export interface RouteBroadcaster {
  stop(): Promise<void>;
}

/** In the primary: reads `source` and keeps every worker's table in step with it. */
export async function broadcastRoutes(
  source: RouteSource,
  log: (line: string) => void,
  onTable?: (snapshot: RouteSnapshot) => void,
): Promise<RouteBroadcaster> {
  let seq = 0;
  let last: RoutesMessage | undefined;
  const acked = new Map<Worker, number>();
  let ackWaiter: (() => void) | undefined;
  let lastSnapshot: RouteSnapshot | undefined;

  cluster.on('message', (worker, message: unknown) => {
    // A worker that has just started asks for the table it missed.
    if (isHello(message)) {
      if (last) worker.send(last);
      return;
    }
    if (!isInstalledMessage(message)) return;
    acked.set(worker, message.seq);
    ackWaiter?.();
  });
  cluster.on('exit', (worker) => acked.delete(worker));
  const live = () => Object.values(cluster.workers ?? {}).filter((w): w is Worker => w !== undefined && !w.isDead());
  const send = (message: RoutesMessage, to: readonly Worker[] = live()) => {
    last = message;
    for (const w of to) if (w.isConnected()) w.send(message);
  };
  const allAcked = (n: number) => live().every((w) => (acked.get(w) ?? -1) >= n);

  const refresher = new RouteRefresher(source, {
    intervalMs: RETRY_MS,
    log,
    apply: async (snapshot) => {
      lastSnapshot = snapshot;
      onTable?.(snapshot);
      const n = ++seq;
      send({ type: ROUTES, seq: n, source: source.description, snapshot });
      const deadline = Date.now() + ACK_WAIT_MS;
      while (!allAcked(n) && Date.now() < deadline) {
        await new Promise<void>((resolve) => {
          const timer = setTimeout(resolve, deadline - Date.now());
          ackWaiter = () => {
            clearTimeout(timer);
            resolve();
          };
        });
      }
      ackWaiter = undefined;
      if (!allAcked(n)) log(`router: not every worker installed routes ${snapshot.version ?? ''} within ${ACK_WAIT_MS} ms`);
    },
    onState: (state: SourceState, error: string | undefined) => {
      if (state === 'unreachable') send({ type: ROUTES, seq: ++seq, source: source.description, error: error ?? 'unreachable' });
      // Reachable again with the same table: workers hear that it is good again.
      else if (state === 'ok' && last !== undefined && 'error' in last && lastSnapshot !== undefined)
        send({ type: ROUTES, seq: ++seq, source: source.description, snapshot: lastSnapshot });
    },
  });
  await refresher.start();
  return { stop: () => refresher.stop() };
}

/** In a worker: the primary's tables as a long-polling RouteSource. */
export class PrimaryRouteSource implements RouteSource {
  readonly longPoll = true;
  private sourceDescription = 'the router primary';
  private pending: RoutesMessage | undefined;
  private waiter: { resolve(m: RoutesMessage): void; reject(err: Error): void } | undefined;
  private lastSeq = 0;
  private readonly onMessage = (message: unknown): void => {
    if (!isRoutesMessage(message)) return;
    this.sourceDescription = `${message.source} via the router primary`;
    if (this.waiter) {
      const w = this.waiter;
      this.waiter = undefined;
      w.resolve(message);
    } else this.pending = message;
  };
  private closed = false;

  constructor() {
    process.on('message', this.onMessage);
    process.send?.({ type: HELLO });
  }

  get description(): string {
    return this.sourceDescription;
  }

  async fetch(): Promise<RouteSnapshot> {
    let message = this.pending;
    if (message !== undefined) this.pending = undefined;
    else {
      // Not cleared after the wait: a message that arrives while this one is being handed over
      // (several arrive in one read) is the next table, and must stay pending.
      message = await new Promise<RoutesMessage>((resolve, reject) => {
        if (this.closed) return reject(new Error('closed'));
        this.waiter = { resolve, reject };
      });
    }
    this.lastSeq = message.seq;
    if ('error' in message) throw new Error(message.error);
    return message.snapshot;
  }

  installed(): void {
    process.send?.({ type: INSTALLED, seq: this.lastSeq } satisfies InstalledMessage);
  }

  close(): Promise<void> {
    this.closed = true;
    process.off('message', this.onMessage);
    this.waiter?.reject(new Error('closed'));
    this.waiter = undefined;
    return Promise.resolve();
  }
}
