// The check that no GPU was ever over-committed, from a node workflow's history alone (docs/sleep.md,
// "Checking it afterwards"): its reserve, release and awake Updates, in the order they completed,
// replayed onto a model of who holds which GPU awake. Pure; the e2e test and the swap bench feed
// it the Updates they decode from `node/<id>`'s history.
import { awakeLoad } from './shared-gpus.js';
import type { Allocation } from '../node-types.js';

/** One Update the node completed: its name, its request and its answer. */
export interface CompletedUpdate {
  name: string;
  request: unknown;
  result: unknown;
  /** Its position in the history (the completion's event id), to name a moment. */
  eventId?: number;
}

export interface AwakeAudit {
  /** Each moment a GPU held more than one GPU's worth awake. */
  violations: string[];
  /** The most awake on any GPU at any moment. */
  maxLoad: number;
  /** How many moments were checked (Updates that changed something). */
  moments: number;
}

type Rec = Record<string, unknown>;
const rec = (v: unknown): Rec => (typeof v === 'object' && v !== null ? (v as Rec) : {});

export function auditAwake(updates: readonly CompletedUpdate[]): AwakeAudit {
  const held: Allocation[] = [];
  const audit: AwakeAudit = { violations: [], maxLoad: 0, moments: 0 };
  for (const update of updates) {
    const request = rec(update.request);
    const result = rec(update.result);
    const shardId = String(request.shardId ?? '');
    const mine = held.find((a) => a.shardId === shardId);
    if (update.name === 'reserve' && result.ok === true && !mine) {
      const share = typeof request.awakeShare === 'number' ? request.awakeShare : undefined;
      held.push({
        shardId,
        replicaId: String(request.replicaId ?? ''),
        gpuIndices: Array.isArray(result.gpuIndices) ? (result.gpuIndices as number[]) : [],
        hcas: [],
        since: '',
        via: 'reserve',
        ...(share !== undefined ? { awakeShare: share, asleep: false } : {}),
      });
    } else if (update.name === 'release' && update.result === true && mine) {
      held.splice(held.indexOf(mine), 1);
    } else if (update.name === 'awake' && result.ok === true && mine && mine.awakeShare !== undefined) {
      mine.asleep = request.awake !== true;
    } else continue;
    audit.moments++;
    for (const gpu of new Set(held.flatMap((a) => a.gpuIndices))) {
      const load = awakeLoad(held, gpu);
      audit.maxLoad = Math.max(audit.maxLoad, load);
      if (load > 1 + 1e-9) {
        const awake = held.filter((a) => a.gpuIndices.includes(gpu) && !a.asleep).map((a) => a.shardId);
        audit.violations.push(
          `after ${update.name} of ${shardId} (event ${update.eventId ?? '?'}): GPU ${gpu} holds ${load} awake (${awake.join(', ')})`,
        );
      }
    }
  }
  return audit;
}
