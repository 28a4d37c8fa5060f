// Routes a router keeps serving after Temporal's view lost them without withdrawing them: a
// routes workflow that started afresh (Temporal lost its data, someone terminated it) or
// visibility hands over a table without some replicas, while their engines still answer. Router
// side: a RouteSource wrapped around the one that talks to Temporal.
//
// The rule (docs/routing.md, "When Temporal forgets"): within one epoch of the routes workflow a
// route that leaves was withdrawn on purpose (drain, scale-down, rollout, a replica that failed)
// and leaves at once. A route that leaves across epochs, or from a visibility read, may only have
// been forgotten: it is held while its engine answers GET /health, until Temporal lists its
// endpoint again (in any phase: then Temporal's word counts, Draining included), until the engine
// fails two checks in a row, or for ten minutes at most. Reconciliation rebuilds a lost replica
// from its agent's report well inside that bound, and kills an engine it cannot describe, which
// ends its hold at the next check.
import { fetch as undiciFetch } from 'undici';
import { keyChainOf } from '../../common/engine-keys.js';
import { pinnedDispatcher } from '../../common/engine-tls.js';
import { EngineAuths } from '../engines/upstream.js';
import { isRoutable, type HeldRouteView, type RouteEntry, type RouteSnapshot, type RouteSource } from './table.js';

export interface HoldSettings {
  /** The longest a route is held. Default 10 minutes. */
  maxHoldMs: number;
  /** Between health checks of held engines. Default 1 s. */
  checkIntervalMs: number;
  /** Failed checks in a row before a held route is dropped. Default 2. */
  failuresToDrop: number;
}

export const DEFAULT_HOLD: HoldSettings = { maxHoldMs: 600_000, checkIntervalMs: 1_000, failuresToDrop: 2 };

export interface HoldingRouteSourceOptions extends Partial<HoldSettings> {
  log?: (line: string) => void;
  /** Whether an engine answers; default GET ENDPOINT/health, 2xx within the check interval. */
  probe?: (endpoint: string, signal: AbortSignal) => Promise<boolean>;
  /** The fleet's engine key (--engine-key-file): each check carries the key derived from it for its route's chain. */
  engineKey?: string | undefined;
}

interface HeldRoute {
  entry: RouteEntry;
  since: number;
  failures: number;
}

async function answersHealth(
  endpoint: string,
  signal: AbortSignal,
  headers: Readonly<Record<string, string>>,
  tlsPin: string | undefined,
): Promise<boolean> {
  try {
    // A route with a pin is checked over TLS with it, as every call there is: an engine showing
    // another certificate does not answer for the held one.
    const res =
      tlsPin === undefined
        ? await fetch(`${endpoint}/health`, { signal, headers })
        : await undiciFetch(`${endpoint}/health`, { signal, headers, dispatcher: pinnedDispatcher(tlsPin) });
    await res.body?.cancel();
    return res.ok;
  } catch {
    return false;
  }
}

export class HoldingRouteSource implements RouteSource {
  readonly description: string;
  readonly longPoll: boolean | undefined;
  private readonly settings: HoldSettings;
  private readonly held = new Map<string, HeldRoute>();
  /** The last table the wrapped source handed over, as it was. */
  private last: RouteSnapshot | undefined;
  /** The wrapped source's read in flight: a read that a dropped hold interrupted is kept for the next call. */
  private pending: Promise<RouteSnapshot> | undefined;
  private wake: (() => void) | undefined;
  /** A hold ended since the last table handed over: the next fetch answers at once. */
  private heldChanged = false;
  private timer: NodeJS.Timeout | undefined;
  private readonly abort = new AbortController();
  private closed = false;
  /** The held engines' keys, by their routes' chains. */
  private readonly auths: EngineAuths;

  constructor(
    private readonly inner: RouteSource,
    private readonly options: HoldingRouteSourceOptions = {},
  ) {
    this.description = inner.description;
    this.longPoll = inner.longPoll;
    this.settings = {
      maxHoldMs: options.maxHoldMs ?? DEFAULT_HOLD.maxHoldMs,
      checkIntervalMs: options.checkIntervalMs ?? DEFAULT_HOLD.checkIntervalMs,
      failuresToDrop: options.failuresToDrop ?? DEFAULT_HOLD.failuresToDrop,
    };
    if (inner.temporalClient) this.temporalClient = inner.temporalClient.bind(inner);
    this.auths = new EngineAuths(options.engineKey);
  }

  temporalClient?: () => Promise<import('@temporalio/client').Client>;

  /** The next table: the wrapped source's, with the held routes added; sooner when a hold ends. */
  async fetch(): Promise<RouteSnapshot> {
    if (this.heldChanged && this.last) {
      this.heldChanged = false;
      return this.compose(this.last);
    }
    this.pending ??= this.inner.fetch().finally(() => (this.pending = undefined));
    const holdEnded = new Promise<undefined>((resolve) => (this.wake = () => resolve(undefined)));
    const next = await Promise.race([this.pending, holdEnded]);
    this.wake = undefined;
    this.heldChanged = false;
    if (next === undefined) return this.compose(this.last as RouteSnapshot);
    this.absorb(next, Date.now());
    return this.compose(next);
  }

  installed(version: number | undefined): void {
    this.inner.installed?.(version);
  }

  async close(): Promise<void> {
    this.closed = true;
    this.abort.abort();
    if (this.timer) clearTimeout(this.timer);
    this.wake?.();
    await this.inner.close();
  }

  /** What is held now, for tests and /health. */
  heldRoutes(): HeldRouteView[] {
    return [...this.held.values()].map(({ entry, since }) => ({
      servedName: entry.servedName,
      endpoint: entry.endpoint,
      replicaId: entry.replicaId,
      since: new Date(since).toISOString(),
    }));
  }

  /** Takes the wrapped source's new table: ends holds it speaks for, starts holds for what it forgot. */
  private absorb(next: RouteSnapshot, now: number): void {
    const listed = new Set(next.routes.map((r) => r.endpoint).filter((e) => e !== ''));
    for (const [endpoint, held] of this.held) {
      if (listed.has(endpoint)) this.release(endpoint, held, now, 'Temporal lists it again');
    }
    const previous = this.last;
    this.last = next;
    if (!previous) return;
    const withdrawn = next.epoch !== undefined && next.epoch === previous.epoch;
    if (withdrawn) return;
    const forgotten = previous.routes.filter(
      (r) => r.endpoint !== '' && isRoutable(r.phase) && !listed.has(r.endpoint) && !this.held.has(r.endpoint),
    );
    if (!forgotten.length) return;
    const why = next.epoch === undefined ? 'visibility no longer lists it' : 'the routes workflow started afresh without it';
    for (const entry of forgotten) {
      this.held.set(entry.endpoint, { entry, since: now, failures: 0 });
      this.options.log?.(
        `router: holding ${entry.servedName} → ${entry.endpoint} (${entry.replicaId}): ${why}; serving it while its engine ` +
          `answers, until Temporal lists it again (at most ${this.settings.maxHoldMs / 1000} s)`,
      );
    }
    this.scheduleChecks();
  }

  private compose(snapshot: RouteSnapshot): RouteSnapshot {
    if (!this.held.size) return snapshot;
    const kept = [...this.held.values()].map((h) => h.entry);
    return { ...snapshot, routes: [...snapshot.routes, ...kept], held: this.heldRoutes() };
  }

  private release(endpoint: string, held: HeldRoute, now: number, why: string): void {
    this.held.delete(endpoint);
    const seconds = ((now - held.since) / 1000).toFixed(1);
    this.options.log?.(`router: ${held.entry.servedName} → ${endpoint} no longer held after ${seconds} s: ${why}`);
  }

  private scheduleChecks(): void {
    if (this.timer || this.closed || !this.held.size) return;
    this.timer = setTimeout(() => void this.check(), this.settings.checkIntervalMs);
    this.timer.unref();
  }

  /** One round of health checks; a route that failed enough of them, or was held too long, leaves now. */
  private async check(): Promise<void> {
    // Each engine is sent its own run's key, from the held route's chain, as every call is.
    this.auths.keepOnly(new Set([...this.held.values()].flatMap((h) => keyChainOf(h.entry) ?? [])));
    const probe =
      this.options.probe ??
      ((endpoint: string, signal: AbortSignal) => {
        const entry = this.held.get(endpoint)?.entry;
        return answersHealth(endpoint, signal, this.auths.for(entry ?? {}).own, entry?.tlsPin);
      });
    const signal = AbortSignal.any([this.abort.signal, AbortSignal.timeout(this.settings.checkIntervalMs)]);
    const round = [...this.held.entries()];
    const answers = await Promise.all(round.map(([endpoint]) => probe(endpoint, signal).catch(() => false)));
    this.timer = undefined;
    if (this.closed) return;
    const now = Date.now();
    let ended = false;
    round.forEach(([endpoint, held], i) => {
      if (this.held.get(endpoint) !== held) return; // released meanwhile
      held.failures = answers[i] ? 0 : held.failures + 1;
      if (held.failures >= this.settings.failuresToDrop) {
        this.release(endpoint, held, now, `its engine failed ${held.failures} health checks in a row`);
        ended = true;
      } else if (now - held.since >= this.settings.maxHoldMs) {
        this.release(endpoint, held, now, `held for the longest allowed; Temporal did not list it again`);
        ended = true;
      }
    });
    if (ended) {
      this.heldChanged = true;
      this.wake?.();
    }
    this.scheduleChecks();
  }
}
