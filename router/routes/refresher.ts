// Keeps the router's table in step with its RouteSource: reads it in a loop (a long-polling
// source back to back, any other on an interval), installs each table that differs from the
// last, tells the source what it installed, and keeps the table it has while the source cannot
// be reached — the router must outlive the control plane. Router side.
import { routesSignature, type HeldRouteView, type RouteSnapshot, type RouteSource } from './table.js';

export type SourceState = 'connecting' | 'ok' | 'unreachable';

export interface SourceStatus {
  source: string;
  state: SourceState;
  /** When the current state began (ISO time). */
  since: string;
  /** When the table was last read successfully; undefined if never. */
  lastUpdate: string | undefined;
  /** The last error while unreachable. */
  error: string | undefined;
  /** The routes workflow's version of the installed table, when the source has versions. */
  version: number | undefined;
  /** Routes served although Temporal's view lost them, while their engines answer (routes/held.ts). */
  held: HeldRouteView[];
}

export interface RouteRefresherOptions {
  /** Between reads of a polled source, and after a failed read of any source. */
  intervalMs: number;
  /** Installs a table that differs from the last one; the next read waits for it. */
  apply(snapshot: RouteSnapshot): void | Promise<void>;
  log(line: string): void;
  /** Hears every change of state (connecting → ok, ok → unreachable, …). */
  onState?(state: SourceState, error: string | undefined): void;
}

/**
 * A failed read keeps the last table, is logged once per outage and shown in /health; the next
 * good read catches up. Reads never overlap.
 */
export class RouteRefresher {
  private state: SourceState = 'connecting';
  private since = new Date();
  private lastUpdate: Date | undefined;
  private lastError: string | undefined;
  private signature: string | undefined;
  private version: number | undefined;
  private held: HeldRouteView[] = [];
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<boolean> | undefined;
  private stopped = false;

  constructor(
    private readonly source: RouteSource,
    private readonly options: RouteRefresherOptions,
  ) {}

  /**
   * Reads once now, so that the first table is there before the server answers, but waits for
   * it at most `firstWaitMs`: a router started while Temporal is down must still come up.
   */
  async start(firstWaitMs = 2000): Promise<void> {
    const first = this.refresh();
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([first, new Promise<void>((resolve) => (timer = setTimeout(resolve, firstWaitMs)))]);
    clearTimeout(timer);
    void first.then(() => this.schedule());
  }

  /** Reads now; resolves when this read (or the one already running) has settled. */
  async refresh(): Promise<void> {
    await this.read();
  }

  status(): SourceStatus {
    return {
      source: this.source.description,
      state: this.state,
      since: this.since.toISOString(),
      lastUpdate: this.lastUpdate?.toISOString(),
      error: this.state === 'unreachable' ? this.lastError : undefined,
      version: this.version,
      held: this.held,
    };
  }

  async stop(): Promise<void> {
    this.stopped = true;
    if (this.timer) clearTimeout(this.timer);
    // A long poll in flight ends when the source closes.
    await this.source.close();
    await this.running?.catch(() => undefined);
  }

  private read(): Promise<boolean> {
    this.running ??= this.poll().finally(() => {
      this.running = undefined;
    });
    return this.running;
  }

  private schedule(ok = true): void {
    if (this.stopped) return;
    const delay = this.source.longPoll && ok ? 0 : this.options.intervalMs;
    this.timer = setTimeout(() => {
      void this.read().then((success) => this.schedule(success));
    }, delay);
    this.timer.unref();
  }

  /** True when the source answered. */
  private async poll(): Promise<boolean> {
    let snapshot: RouteSnapshot;
    try {
      snapshot = await this.source.fetch();
    } catch (err) {
      if (this.stopped) return false;
      this.lastError = err instanceof Error ? err.message : String(err);
      if (this.state !== 'unreachable') {
        this.state = 'unreachable';
        this.since = new Date();
        const kept = this.signature === undefined ? 'no routes yet' : 'keeping the last route table';
        this.options.log(`router: route source ${this.source.description} unreachable (${this.lastError}); ${kept}`);
        this.options.onState?.('unreachable', this.lastError);
      }
      return false;
    }
    if (this.state !== 'ok') {
      if (this.state === 'unreachable') {
        const seconds = ((Date.now() - this.since.getTime()) / 1000).toFixed(1);
        this.options.log(`router: route source ${this.source.description} reachable again after ${seconds} s; catching up`);
      }
      this.state = 'ok';
      this.since = new Date();
      this.options.onState?.('ok', undefined);
    }
    this.lastUpdate = new Date();
    const signature = routesSignature(snapshot.routes, snapshot.deployments);
    if (signature !== this.signature) {
      try {
        await this.options.apply(snapshot);
        this.signature = signature;
      } catch (err) {
        // Keep the table we have; the next change will try again.
        this.signature = undefined;
        this.options.log(`router: could not apply the route table: ${(err as Error).message}`);
        return true;
      }
    }
    this.version = snapshot.version;
    this.held = snapshot.held ?? [];
    this.source.installed?.(snapshot.version);
    return true;
  }
}
