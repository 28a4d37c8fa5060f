// The router's autoscaler, in the one process per router that talks to Temporal (the primary of
// a --workers cluster, or the router itself). Every second, for each autoscaled deployment in the
// route table: its load from the engines' own metrics and the requests routers hold, through the
// stabilization windows (autoscale/rule.ts), and the `autoscale` Update only when the count
// changes; `wake` for a deployment at zero while requests wait for it. Deployments whose profile
// has a sleep policy follow the ladder too (ladder.ts): idle replicas sleep, load wakes them
// before any replica is added. Steady load sends nothing. Router side; docs/autoscaling.md.
import type { Registry } from 'prom-client';
import { autoscalerSeries, type AutoscalerSeries } from './series.js';
import { recommendReplicas, type AutoscalePolicy } from '../../common/autoscale.js';
import type { WakeCaller } from '../engines/wake.js';
import type { DeploymentControl, Outcome, ReplicaSleeper } from './temporal.js';
import { metricValue, Stabilizer, type Decision, type DeploymentSignals } from './rule.js';
import { mergeReports, type LoadReport } from './load-report.js';
import { SleepLadder } from './ladder.js';
import { isRoutable, servingRevisions, type DeploymentEntry, type RouteEntry, type RouteSnapshot } from '../routes/table.js';

export interface AutoscalerOptions {
  /** Undefined: recommendations are computed and shown, nothing is sent (static routes). */
  control: DeploymentControl | undefined;
  /** The sleepReplica Update (the ladder); undefined: idle replicas are not put to sleep. */
  sleep?: ReplicaSleeper;
  /** The router's wakeReplica caller, shared with the wakes for held requests. */
  wake?: WakeCaller;
  /** Where llmgw_autoscaler_* live (the process's own registry, beside its Temporal call counts). */
  registry: Registry;
  /** The latest report of every router process. */
  reports(): LoadReport[];
  /** Who decides, in each decision (host/pid). */
  routerId: string;
  log(line: string): void;
  intervalMs?: number;
}

/** An engine scrape older than this says nothing about now. */
const STALE_SAMPLE_MS = 5_000;
/** After a count is sent, how long to wait for the table to show it before deciding again. */
const PENDING_MS = 10_000;
/** While requests wait for a deployment at zero, a wake is sent again this often (a lost one is retried). */
const WAKE_EVERY_MS = 2_000;

interface Tracked {
  stabilizer: Stabilizer;
  /** A count sent, not yet in the table. */
  pending?: { desired: number; until: number };
  /** A call in flight: one at a time per deployment. */
  busy: boolean;
  lastWakeAt: number;
}

export class Autoscaler {
  private table: RouteSnapshot | undefined;
  private readonly tracked = new Map<string, Tracked>();
  /** Each engine's request counter at the last tick: a change is a request served. */
  private readonly counters = new Map<string, number>();
  private timer: NodeJS.Timeout | undefined;
  private readonly series: AutoscalerSeries;
  private readonly ladder: SleepLadder;

  constructor(private readonly options: AutoscalerOptions) {
    this.ladder = new SleepLadder({
      sleep: options.control ? options.sleep : undefined,
      wake: options.control ? options.wake : undefined,
      registry: options.registry,
      routerId: options.routerId,
      log: options.log,
    });
    this.series = autoscalerSeries(options.registry);
  }

  setTable(snapshot: RouteSnapshot): void {
    this.table = snapshot;
    for (const d of snapshot.deployments) {
      const t = this.tracked.get(d.name);
      if (t?.pending && t.pending.desired === d.desired) t.pending = undefined;
    }
  }

  start(): void {
    this.timer = setInterval(() => this.tick(Date.now()), this.options.intervalMs ?? 1000);
    this.timer.unref();
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer);
  }

  /** Requests wait at a router for this model with no routable replica: wake its deployment now if it is at zero. */
  hold(model: string): void {
    const d = this.autoscaled().find((x) => x.servedName === model || x.name === model);
    if (d !== undefined && d.desired === 0) this.wake(d, 'a request is held at the router', Date.now());
  }

  tick(now: number): void {
    const load = mergeReports(this.options.reports());
    const routes = this.table?.routes ?? [];
    const engines = this.engineActivity(load, routes, now);
    const seen = new Set<string>();
    const autoscaled = this.autoscaled();
    // Several deployments may serve one name: what routers hold for it counts towards the first.
    const queuedFor = new Map<string, string>();
    for (const d of autoscaled) if (!queuedFor.has(d.servedName)) queuedFor.set(d.servedName, d.name);
    const serving = servingRevisions(routes);
    for (const d of this.listed()) {
      seen.add(d.name);
      const own = routes.filter((r) => r.deployment === d.name);
      // A request held for its model is activity for each of its replicas; an unscraped engine too.
      const held = (load.queued[d.servedName] ?? 0) > 0;
      this.ladder.sleepIdle(d, own, (r) => held || (engines.get(r.endpoint) ?? true), now);
      if (d.autoscale === undefined) continue;
      const urls = own.filter((r) => r.endpoint !== '' && isRoutable(r.phase)).map((r) => r.endpoint);
      const signals: DeploymentSignals = { running: 0, waiting: 0, kvCache: 0, queued: 0, inFlight: 0, routable: urls.length };
      signals.queued = queuedFor.get(d.servedName) === d.name ? (load.queued[d.servedName] ?? 0) : 0;
      if (d.autoscale.ignoreSheddable && signals.queued > 0) {
        signals.sheddableLeftOut = Math.min(signals.queued, load.sheddable?.[d.servedName] ?? 0);
        signals.queued -= signals.sheddableLeftOut;
      }
      // Unknown load (no scrape yet, metrics unreachable, a replica still starting) is not idleness.
      let active = signals.queued + (signals.sheddableLeftOut ?? 0) > 0 || (urls.length === 0 && d.desired > 0);
      let kvSum = 0;
      for (const url of urls) {
        const sample = load.engines[url];
        active ||= engines.get(url) ?? true;
        if (sample === undefined || sample.at === 0 || now - sample.at > STALE_SAMPLE_MS) continue;
        signals.running += sample.running;
        signals.waiting += sample.waiting;
        signals.inFlight += Math.max(sample.running + sample.waiting, sample.inflight);
        kvSum += sample.kvUsage;
      }
      signals.kvCache = urls.length > 0 ? kvSum / urls.length : 0;
      const revision = serving.get(d.name);
      const sleeping = own.filter(
        (r) => r.phase === 'Sleeping' && (r.revision === undefined || revision === undefined || r.revision === revision),
      );
      this.decide(d, d.autoscale as AutoscalePolicy, signals, active, now, sleeping);
    }
    for (const name of this.tracked.keys()) if (!seen.has(name)) this.forget(name);
    this.ladder.prune(seen, now);
    const live = new Set(routes.map((r) => r.endpoint));
    for (const url of this.counters.keys()) if (!live.has(url)) this.counters.delete(url);
  }

  /**
   * Each routable engine's activity since the last tick: true when its request counter moved or
   * something runs, waits or is in flight there, or when its load is unknown (no fresh scrape);
   * false when it is idle. Read once a tick: the counters move on here.
   */
  private engineActivity(load: LoadReport, routes: readonly RouteEntry[], now: number): Map<string, boolean> {
    const activity = new Map<string, boolean>();
    for (const r of routes) {
      if (r.endpoint === '' || !isRoutable(r.phase) || activity.has(r.endpoint)) continue;
      const sample = load.engines[r.endpoint];
      if (sample === undefined || sample.at === 0 || now - sample.at > STALE_SAMPLE_MS) {
        activity.set(r.endpoint, true);
        continue;
      }
      const before = this.counters.get(r.endpoint);
      this.counters.set(r.endpoint, sample.requests);
      activity.set(
        r.endpoint,
        sample.running + sample.waiting + sample.inflight > 0 || (before !== undefined && before !== sample.requests),
      );
    }
    return activity;
  }

  private decide(
    d: DeploymentEntry,
    policy: AutoscalePolicy,
    s: DeploymentSignals,
    active: boolean,
    now: number,
    sleeping: RouteEntry[],
  ): void {
    let t = this.tracked.get(d.name);
    if (t === undefined) {
      t = { stabilizer: new Stabilizer(now), busy: false, lastWakeAt: 0 };
      this.tracked.set(d.name, t);
    }
    // With a sleep policy, idle replicas sleep and are stopped by their stopAfterSeconds: not idle-to-zero.
    const step = t.stabilizer.step(policy, d.desired, s, active, now, d.sleep === undefined);
    this.series.recommended.set({ deployment: d.name }, step.recommended);
    this.series.desired.set({ deployment: d.name }, d.desired);
    for (const [signal, value] of [
      ['running', s.running],
      ['waiting', s.waiting],
      ['kv_cache', s.kvCache],
      ['queued', s.queued],
      ['in_flight', s.inFlight],
      ['routable', s.routable],
    ] as const)
      this.series.signal.set({ deployment: d.name, signal }, value);
    if (t.pending && now > t.pending.until) t.pending = undefined;
    // At zero, requests waiting wake it (the purpose-made Update); the windows take over from one.
    if (d.desired === 0) {
      // Sheddable requests left out of scaling still wake it: else they could only time out.
      const held = s.queued + (s.sheddableLeftOut ?? 0);
      if (held > 0) this.wake(d, `${held} request(s) held at routers`, now);
      return;
    }
    // Sleepers are capacity that wakes in a second: woken for the load first, and while any
    // sleeps no replica is added (a new one costs a cold start).
    let sleepers = 0;
    if (d.sleep !== undefined) {
      const wanted = recommendReplicas(policy, s.routable, { value: metricValue(policy, s), queued: s.queued });
      sleepers = this.ladder.wakeForLoad(d, sleeping, s.routable, wanted, now);
    }
    if (step.decision === undefined || step.decision.desired === d.desired || t.pending || t.busy || !this.options.control) return;
    if (step.decision.direction === 'up' && sleepers > 0) return;
    this.send(d, t, step.decision, s, now);
  }

  private send(d: DeploymentEntry, t: Tracked, decision: Decision, s: DeploymentSignals, now: number): void {
    const control = this.options.control as DeploymentControl;
    t.busy = true;
    const signals: Record<string, number> = { ...s };
    const by = this.options.routerId;
    this.settle(
      d.name,
      t,
      decision.direction,
      control.decide(d.name, { desired: decision.desired, reason: decision.reason, signals, by }),
      (outcome) => {
        if (outcome.accepted) this.options.log(`router: autoscaled ${d.name} ${d.desired} → ${decision.desired}: ${decision.reason}`);
        t.pending = { desired: decision.desired, until: now + PENDING_MS };
        t.stabilizer.decided();
      },
    );
  }

  private wake(d: DeploymentEntry, reason: string, now: number): void {
    const control = this.options.control;
    let t = this.tracked.get(d.name);
    if (t === undefined) {
      t = { stabilizer: new Stabilizer(now), busy: false, lastWakeAt: 0 };
      this.tracked.set(d.name, t);
    }
    if (control === undefined || t.busy || now - t.lastWakeAt < WAKE_EVERY_MS) return;
    t.lastWakeAt = now;
    t.busy = true;
    const tracked = t;
    this.settle(d.name, t, 'wake', control.wake(d.name, { reason, by: this.options.routerId }), (outcome) => {
      if (outcome.accepted) this.options.log(`router: woke ${d.name} (${reason}): desired ${outcome.desired}`);
      tracked.stabilizer.decided();
    });
  }

  /** Counts and logs a call's outcome; a failure is retried on a later tick. */
  private settle(name: string, t: Tracked, direction: string, call: Promise<Outcome>, done: (outcome: Outcome) => void): void {
    call.then(
      (outcome) => {
        t.busy = false;
        this.series.decisions.inc({ deployment: name, direction, result: outcome.accepted ? 'accepted' : 'refused' });
        if (outcome.accepted) this.series.lastDecision.set({ deployment: name }, Date.now() / 1000);
        done(outcome);
      },
      (err: unknown) => {
        t.busy = false;
        this.series.decisions.inc({ deployment: name, direction, result: 'failed' });
        this.options.log(`router: could not ${direction === 'wake' ? 'wake' : 'autoscale'} ${name}: ${(err as Error).message}`);
      },
    );
  }

  /** Deployments the autoscaler looks after: autoscaled ones, and those whose replicas sleep when idle. */
  private listed(): DeploymentEntry[] {
    return (this.table?.deployments ?? [])
      .filter((d) => (d.autoscale !== undefined || d.sleep !== undefined) && d.phase !== 'Undeploying' && d.phase !== 'Undeployed')
      .sort((a, b) => a.name.localeCompare(b.name));
  }

  private autoscaled(): DeploymentEntry[] {
    return (this.table?.deployments ?? [])
      .filter((d) => d.autoscale !== undefined && d.phase !== 'Undeploying' && d.phase !== 'Undeployed')
      .sort((a, b) => a.name.localeCompare(b.name));
  }

  private forget(name: string): void {
    this.tracked.delete(name);
    this.series.recommended.remove({ deployment: name });
    this.series.desired.remove({ deployment: name });
    this.series.lastDecision.remove({ deployment: name });
    for (const signal of ['running', 'waiting', 'kv_cache', 'queued', 'in_flight', 'routable'])
      this.series.signal.remove({ deployment: name, signal });
  }
}
