// When a router puts an idle replica to sleep, and when it wakes sleepers for rising load: the
// autoscaler's ladder awake → sleeping → stopped (docs/autoscaling.md, "The ladder"). Pure logic
// over a clock the caller passes; the autoscaler sends the Updates. Router side.
import type { SleepPolicy } from '../../common/sleep-types.js';
import type { ReplicaPhase } from '../../common/replica-types.js';

/** One replica of a deployment as the route table and its engine's metrics show it this tick. */
export interface ReplicaSeen {
  replicaId: string;
  phase: ReplicaPhase;
  /**
   * Its engine served or holds something since the last tick (its request counter moved,
   * something runs or waits there, a router holds requests for its model), or its load is
   * unknown (no fresh scrape): nothing is put to sleep blind.
   */
  active: boolean;
}

export interface SleepChoice {
  replicaId: string;
  reason: string;
}

/** What came of a sleepReplica Update. */
export type SleepResult = 'asleep' | 'refused' | 'failed';

/** After an Update failed (Temporal or the control worker unreachable, an engine that would not sleep): ask again after this. */
export const FAILED_BACKOFF_MS = 30_000;
/** After a refusal that says nothing of minAwakeSeconds (another router's sleep under way, a hand-over): ask again after this. */
export const REFUSED_BACKOFF_MS = 10_000;

interface Watched {
  phase: ReplicaPhase;
  /** Since when it is idle: the last tick it was active, or when it turned Ready. */
  idleSince: number;
  /** Not before this (a wake's minAwakeSeconds, a refusal's or failure's back-off). */
  notBefore: number;
  /** A sleepReplica Update from this router is in flight. */
  asking: boolean;
}

/**
 * One deployment's replicas, for idle sleep. A replica is put to sleep when it has been Ready
 * and idle for the policy's `afterSeconds`; one that was just woken (seen Sleeping, now Ready)
 * not before its `minAwakeSeconds` either, which the replica's validator would refuse anyway.
 */
export class IdleSleeper {
  private readonly replicas = new Map<string, Watched>();

  /** The replicas to put to sleep now; call once a tick with every replica the table lists for the deployment. */
  step(policy: SleepPolicy, seen: readonly ReplicaSeen[], now: number): SleepChoice[] {
    const choices: SleepChoice[] = [];
    const listed = new Set<string>();
    for (const r of seen) {
      listed.add(r.replicaId);
      let w = this.replicas.get(r.replicaId);
      if (w === undefined) {
        // First seen (or this router just started): a whole idle period from now.
        w = { phase: r.phase, idleSince: now, notBefore: now, asking: false };
        this.replicas.set(r.replicaId, w);
      }
      if (r.phase === 'Ready' && w.phase !== 'Ready') {
        // Turned Ready: its idle time starts now; a wake also keeps it awake minAwakeSeconds.
        w.idleSince = now;
        if (w.phase === 'Sleeping') w.notBefore = Math.max(w.notBefore, now + policy.minAwakeSeconds * 1000);
      }
      w.phase = r.phase;
      if (r.phase !== 'Ready' || r.active) {
        if (r.active) w.idleSince = now;
        continue;
      }
      const idleMs = now - w.idleSince;
      if (w.asking || now < w.notBefore || idleMs < policy.afterSeconds * 1000) continue;
      w.asking = true;
      choices.push({ replicaId: r.replicaId, reason: `idle ${Math.round(idleMs / 1000)} s` });
    }
    for (const id of this.replicas.keys()) if (!listed.has(id)) this.replicas.delete(id);
    return choices;
  }

  /**
   * An Update this router sent was answered. Asleep: the table shows it Sleeping soon (the
   * replica publishes that before its engines sleep). Refused within minAwakeSeconds of a wake:
   * not again before that has passed; asleep, refused otherwise or failed: after a back-off.
   */
  answered(policy: SleepPolicy, replicaId: string, result: SleepResult, now: number, why = ''): void {
    const w = this.replicas.get(replicaId);
    if (w === undefined) return;
    w.asking = false;
    w.idleSince = now;
    // Asleep: the table shows it Sleeping any moment; until then it is not asked again.
    const backoff =
      result === 'failed' ? FAILED_BACKOFF_MS : /minAwakeSeconds/.test(why) ? policy.minAwakeSeconds * 1000 : REFUSED_BACKOFF_MS;
    w.notBefore = now + Math.max(backoff, REFUSED_BACKOFF_MS);
  }

  /** No replica of it is watched any more (the deployment left the table). */
  get empty(): boolean {
    return this.replicas.size === 0;
  }
}

/**
 * Which sleepers to wake for the load: when the replicas awake are fewer than the load asks for
 * (`wanted`, the count recommendReplicas gives for the awake ones), the first sleepers by
 * replica id, as many as are missing. None while nothing is awake: a request held at a router
 * wakes the first sleeper itself (router/engines/wake.ts), and a second asker would only be a
 * second Update in its history.
 */
export function sleepersToWake(awake: number, wanted: number, sleepers: readonly string[]): string[] {
  if (awake === 0 || wanted <= awake) return [];
  return [...sleepers].sort().slice(0, wanted - awake);
}
