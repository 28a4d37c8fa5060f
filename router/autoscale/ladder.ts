// The autoscaler's sleep ladder (docs/autoscaling.md, "The ladder"), for deployments whose
// profile has a sleep policy: a replica idle `afterSeconds` is put to sleep (the replica's
// `sleepReplica` Update, by `autoscaler:<router id>`), and load that the awake replicas cannot
// carry wakes sleepers (`wakeReplica`) before any replica is added. Stopping sleepers is the
// replica's own stopAfterSeconds. Router side; the rules are idle-sleep.ts.
import type { Counter, Registry } from 'prom-client';
import type { WakeCaller } from '../engines/wake.js';
import { Series } from '../series.js';
import type { DeploymentEntry, RouteEntry } from '../routes/table.js';
import { IdleSleeper, sleepersToWake, type ReplicaSeen } from './idle-sleep.js';
import type { ReplicaSleeper } from './temporal.js';

export interface LadderOptions {
  /** Undefined: nothing is sent (static routes). */
  sleep: ReplicaSleeper | undefined;
  /** The router's own wake caller (one Update per replica at a time, shared with held requests). */
  wake: WakeCaller | undefined;
  registry: Registry;
  routerId: string;
  log(line: string): void;
}

/** After a wake for load, how long its replica may still show Sleeping before it is woken again (router/engines/wake.ts's settling time). */
const WAKE_SETTLE_MS = 10_000;

export class SleepLadder {
  private readonly idle = new Map<string, IdleSleeper>();
  /** Replicas woken for load, and until when a second wake is not sent. */
  private readonly woken = new Map<string, number>();
  private readonly sleeps: Counter<'deployment' | 'result'>;
  private readonly wakes: Counter<'deployment' | 'result'>;

  constructor(private readonly options: LadderOptions) {
    const series = new Series(options.registry);
    this.sleeps = series.counter(
      'llmgw_autoscaler_sleeps_total',
      'Idle replicas this router put to sleep, by deployment and result (asleep; refused: by the replica, as asleep already or woken too recently; failed).',
      ['deployment', 'result'],
    );
    this.wakes = series.counter(
      'llmgw_autoscaler_wakes_total',
      'Sleeping replicas this router woke because the load outgrew the awake ones, by deployment and result (woken, awake, failed).',
      ['deployment', 'result'],
    );
  }

  /** Who asks, in the replica's history. */
  get by(): string {
    return `autoscaler:${this.options.routerId}`;
  }

  /** Puts the deployment's idle Ready replicas to sleep. `active(route)`: its engine served or holds something, or its load is unknown. */
  sleepIdle(d: DeploymentEntry, routes: readonly RouteEntry[], active: (route: RouteEntry) => boolean, now: number): void {
    const policy = d.sleep;
    if (policy === undefined) return;
    let rule = this.idle.get(d.name);
    if (rule === undefined) {
      rule = new IdleSleeper();
      this.idle.set(d.name, rule);
    }
    const seen: ReplicaSeen[] = routes.map((r) => ({ replicaId: r.replicaId, phase: r.phase, active: r.endpoint === '' || active(r) }));
    const sleep = this.options.sleep;
    for (const choice of rule.step(policy, seen, now)) {
      if (sleep === undefined) {
        rule.answered(policy, choice.replicaId, 'refused', now, 'this router sends no Updates');
        continue;
      }
      const idle = rule;
      sleep(choice.replicaId, { by: this.by, reason: choice.reason }).then(
        (outcome) => {
          const result = outcome.asleep ? 'asleep' : 'refused';
          idle.answered(policy, choice.replicaId, result, Date.now(), outcome.asleep ? '' : outcome.refused);
          this.sleeps.inc({ deployment: d.name, result });
          this.options.log(
            outcome.asleep
              ? `router: put ${choice.replicaId} to sleep (${choice.reason})`
              : `router: ${choice.replicaId} stays awake: ${outcome.refused}`,
          );
        },
        (err: unknown) => {
          idle.answered(policy, choice.replicaId, 'failed', Date.now());
          this.sleeps.inc({ deployment: d.name, result: 'failed' });
          this.options.log(`router: could not put ${choice.replicaId} to sleep: ${(err as Error).message}`);
        },
      );
    }
  }

  /**
   * Wakes sleepers when the awake replicas are fewer than the load asks for (`wanted`). Returns
   * how many sleepers there are: while any, the autoscaler adds no replica (one that wakes in a
   * second beats one that starts in minutes).
   */
  wakeForLoad(d: DeploymentEntry, sleeping: readonly RouteEntry[], awake: number, wanted: number, now: number): number {
    const wake = this.options.wake;
    if (wake === undefined) return sleeping.length;
    // Nothing awake: a held request wakes the first sleeper (router/engines/wake.ts), not this.
    if (awake === 0) return sleeping.length;
    const candidates = sleeping.map((r) => r.replicaId).filter((id) => (this.woken.get(id) ?? 0) <= now);
    // Sleepers woken a moment ago, still shown Sleeping, are capacity on its way.
    const waking = sleeping.length - candidates.length;
    for (const replicaId of sleepersToWake(awake + waking, wanted, candidates)) {
      this.woken.set(replicaId, now + WAKE_SETTLE_MS);
      const reason = `the load asks for ${wanted} awake replica(s), ${awake} are`;
      wake(replicaId, { by: this.by, reason }).then(
        (result) => {
          this.wakes.inc({ deployment: d.name, result: result.alreadyAwake ? 'awake' : 'woken' });
          this.options.log(`router: woke ${replicaId} in ${result.wokeInMs} ms (${reason})`);
        },
        (err: unknown) => {
          this.wakes.inc({ deployment: d.name, result: 'failed' });
          this.options.log(`router: could not wake ${replicaId}: ${(err as Error).message}`);
        },
      );
    }
    return sleeping.length;
  }

  /** Forgets deployments no longer listed, and wakes long settled. */
  prune(listed: ReadonlySet<string>, now: number): void {
    for (const name of this.idle.keys()) if (!listed.has(name)) this.idle.delete(name);
    for (const [id, until] of this.woken) if (until <= now) this.woken.delete(id);
  }
}
