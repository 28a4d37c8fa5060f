// When a deployment's load becomes a new replica count: common/autoscale.ts's recommendReplicas
// turned into decisions through stabilization windows, per deployment. Up after upAfterSeconds
// of sustained demand above the count (the smallest count asked for over that window, as
// Kubernetes' HPA does), at once when demand is over twice what the count is sized for (Knative's
// panic mode, over a tenth of the up window); down after downAfterSeconds below it (the largest
// count asked for over that window); to zero only after idleToZeroSeconds with no request and
// nothing running or held, unless its replicas sleep when idle (idle-sleep.ts). Pure logic over
// a clock the caller passes. Router side.
import { recommendReplicas, type AutoscalePolicy } from '../../common/autoscale.js';

/** One deployment's load, as the autoscaler adds it up from every engine and router process. */
export interface DeploymentSignals {
  /** Requests the engines run, summed. */
  running: number;
  /** Requests waiting inside the engines, summed. */
  waiting: number;
  /** Mean KV-cache use of the engines, 0–1. */
  kvCache: number;
  /** Requests held by routers for it (at zero, starting, or saturated); without the sheddable ones when its policy ignores them. */
  queued: number;
  /** Sheddable requests held that `queued` leaves out (autoscale.ignoreSheddable): they still wake it from zero. */
  sheddableLeftOut?: number;
  /** Requests at the engines: each engine's running + waiting, or the routers' own count there when that is higher (fresher). */
  inFlight: number;
  /** Replicas routers can send to. */
  routable: number;
}

export type Direction = 'up' | 'down';

export interface Decision {
  desired: number;
  direction: Direction;
  reason: string;
}

export interface Step {
  /** What the load asks for now, before stabilization. */
  recommended: number;
  /** A count to send, when a window has run its course. */
  decision?: Decision;
}

/** The value of the policy's metric, the way recommendReplicas reads it. */
export function metricValue(policy: AutoscalePolicy, s: DeploymentSignals): number {
  switch (policy.metric) {
    case 'inFlight':
      return s.inFlight;
    case 'waiting':
      return s.waiting;
    case 'kvCache':
      return s.kvCache;
  }
}

/**
 * How many times what the current count is sized for the demand is: for counts, demand over
 * count × target; for KV-cache use, the count asked for over the count.
 */
function overload(policy: AutoscalePolicy, current: number, s: DeploymentSignals, recommended: number): number {
  if (current === 0) return Infinity;
  if (policy.metric === 'kvCache') return recommended / current;
  return (metricValue(policy, s) + s.queued) / (current * policy.target);
}

const round = (n: number): string => (Number.isInteger(n) ? String(n) : n.toFixed(2));

export function describeSignals(policy: AutoscalePolicy, s: DeploymentSignals): string {
  const value =
    policy.metric === 'kvCache' ? `KV cache ${Math.round(s.kvCache * 100)} %` : `${policy.metric} ${round(metricValue(policy, s))}`;
  return `${value}${s.queued > 0 ? ` + ${s.queued} held at routers` : ''} on ${s.routable} routable, target ${round(policy.target)} per replica`;
}

/** One deployment's windows. Safe to call every tick; `decided` restarts them once a count is sent. */
export class Stabilizer {
  private lastActiveAt: number;
  private aboveSince: number | undefined;
  private upMin = Infinity;
  private panicSince: number | undefined;
  private belowSince: number | undefined;
  private downMax = -Infinity;

  constructor(now: number) {
    this.lastActiveAt = now;
  }

  /**
   * `active`: a request was seen since the last step (an engine counter moved, something runs or
   * waits). `idleToZero` false: a deployment whose replicas sleep when idle, and are stopped by
   * their stopAfterSeconds instead (the ladder, docs/autoscaling.md).
   */
  step(policy: AutoscalePolicy, current: number, s: DeploymentSignals, active: boolean, now: number, idleToZero = true): Step {
    if (active) this.lastActiveAt = now;
    const raw = recommendReplicas(policy, current, { value: metricValue(policy, s), queued: s.queued });
    // Load alone never takes a deployment to zero: only idleness does, below.
    const recommended = current > 0 ? Math.max(raw, 1) : raw;

    if (current === 0) {
      this.clear();
      return recommended > 0
        ? { recommended, decision: { desired: recommended, direction: 'up', reason: `woken: ${describeSignals(policy, s)}` } }
        : { recommended };
    }
    const idleMs = idleAfterSeconds(policy) * 1000;
    if (idleToZero && policy.min === 0 && Number.isFinite(idleMs) && !active && now - this.lastActiveAt >= idleMs) {
      return {
        recommended: 0,
        decision: {
          desired: 0,
          direction: 'down',
          reason: `idle to zero: no request for ${Math.round((now - this.lastActiveAt) / 1000)} s, nothing running or held`,
        },
      };
    }
    if (recommended > current) {
      this.belowSince = undefined;
      this.downMax = -Infinity;
      this.aboveSince ??= now;
      this.upMin = Math.min(this.upMin, recommended);
      const ratio = overload(policy, current, s, recommended);
      if (ratio > 2) this.panicSince ??= now;
      else this.panicSince = undefined;
      const panicMs = policy.upAfterSeconds * 100;
      if (this.panicSince !== undefined && now - this.panicSince >= panicMs) {
        const reason = `panic: demand ${round(ratio)}× what ${current} replica(s) are sized for (${describeSignals(policy, s)})`;
        return { recommended, decision: { desired: recommended, direction: 'up', reason } };
      }
      if (now - this.aboveSince >= policy.upAfterSeconds * 1000) {
        const reason = `${describeSignals(policy, s)}: ${this.upMin} wanted for ${policy.upAfterSeconds} s`;
        return { recommended, decision: { desired: this.upMin, direction: 'up', reason } };
      }
      return { recommended };
    }
    if (recommended < current) {
      this.aboveSince = undefined;
      this.upMin = Infinity;
      this.panicSince = undefined;
      this.belowSince ??= now;
      this.downMax = Math.max(this.downMax, recommended);
      if (now - this.belowSince >= policy.downAfterSeconds * 1000) {
        const reason = `${describeSignals(policy, s)}: at most ${this.downMax} wanted for ${policy.downAfterSeconds} s`;
        return { recommended, decision: { desired: this.downMax, direction: 'down', reason } };
      }
      return { recommended };
    }
    this.clear();
    return { recommended };
  }

  /** A count was sent: every window starts again from the new one. */
  decided(): void {
    this.clear();
  }

  private clear(): void {
    this.aboveSince = undefined;
    this.upMin = Infinity;
    this.panicSince = undefined;
    this.belowSince = undefined;
    this.downMax = -Infinity;
  }
}

/** With min 0: idleToZeroSeconds, or the down window when it is not set. Infinity without min 0. */
export function idleAfterSeconds(policy: AutoscalePolicy): number {
  if (policy.min !== 0) return Infinity;
  return policy.idleToZeroSeconds ?? policy.downAfterSeconds;
}
