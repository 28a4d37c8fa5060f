// A deployment's autoscaling settings: one zod definition for the catalog, `llmgw deploy`
// and deployModel's plain-JSON input, and the pure rule that turns load into a replica count.
// Safe to import from workflows (no Node built-ins).
//
// Defaults, from the anchors:
//  - the signal is requests in flight per replica (the engine's running + waiting, plus what
//    routers hold for it), target 8: vLLM batches, so a replica with 8 in flight is busy but
//    not queueing; `waiting` (KEDA on vllm:num_requests_waiting in the vLLM production stack)
//    and `kvCache` (Dynamo's planner) are the alternatives;
//  - ±10 % tolerance and a 180 s stable window for scaling down, 60 s panic window for scaling
//    up (AIBrix); scale up after 30 s of load, down after 300 s (Ray Serve, AIBrix cooldown).
import { z } from 'zod';

export const AUTOSCALE_METRICS = ['inFlight', 'waiting', 'kvCache'] as const;
export type AutoscaleMetric = (typeof AUTOSCALE_METRICS)[number];

const DEFAULT_TARGET: Record<AutoscaleMetric, number> = { inFlight: 8, waiting: 2, kvCache: 0.8 };

export const AutoscaleSchema = z
  .strictObject({
    min: z.int('min must be a whole number').min(0, 'min must be ≥ 0'),
    max: z.int('max must be a whole number').min(1, 'max must be ≥ 1'),
    metric: z.enum(AUTOSCALE_METRICS, { error: `metric must be one of ${AUTOSCALE_METRICS.join(', ')}` }).optional(),
    /** Per replica: requests in flight, requests waiting, or KV-cache use (0–1). */
    target: z.number().positive('target must be > 0').optional(),
    /** With min 0: after this long with no request, go to 0 replicas (Idle). */
    idleToZeroSeconds: z.int('idleToZeroSeconds must be a whole number').min(1, 'idleToZeroSeconds must be ≥ 1').optional(),
    upAfterSeconds: z.int().min(0, 'upAfterSeconds must be ≥ 0').optional(),
    downAfterSeconds: z.int().min(0, 'downAfterSeconds must be ≥ 0').optional(),
    tolerance: z.number().min(0, 'tolerance must be ≥ 0').max(1, 'tolerance must be ≤ 1').optional(),
    /** Held sheddable requests (priority below zero) add no replica: batch work waits for room, it does not buy GPUs. */
    ignoreSheddable: z.boolean('ignoreSheddable must be true or false').optional(),
  })
  .refine((a) => a.min <= a.max, { message: 'min must not be above max', path: ['min'] })
  .refine((a) => a.idleToZeroSeconds === undefined || a.min === 0, {
    message: 'idleToZeroSeconds needs min 0',
    path: ['idleToZeroSeconds'],
  })
  .refine((a) => a.metric !== 'kvCache' || (a.target ?? 0.8) <= 1, { message: 'a kvCache target is a fraction (≤ 1)', path: ['target'] });

export type AutoscaleSettings = z.infer<typeof AutoscaleSchema>;

/** The settings with every default filled in. */
export interface AutoscalePolicy {
  min: number;
  max: number;
  metric: AutoscaleMetric;
  target: number;
  idleToZeroSeconds?: number;
  upAfterSeconds: number;
  downAfterSeconds: number;
  tolerance: number;
  /** Present (true) only when set, so that policies published before it sign and compare as they did. */
  ignoreSheddable?: true;
}

export function autoscalePolicy(settings: AutoscaleSettings): AutoscalePolicy {
  const metric = settings.metric ?? 'inFlight';
  return {
    min: settings.min,
    max: settings.max,
    metric,
    target: settings.target ?? DEFAULT_TARGET[metric],
    ...(settings.idleToZeroSeconds !== undefined ? { idleToZeroSeconds: settings.idleToZeroSeconds } : {}),
    upAfterSeconds: settings.upAfterSeconds ?? 30,
    downAfterSeconds: settings.downAfterSeconds ?? 300,
    tolerance: settings.tolerance ?? 0.1,
    ...(settings.ignoreSheddable === true ? { ignoreSheddable: true as const } : {}),
  };
}

export interface LoadSample {
  /** The deployment's total of the chosen metric (summed over replicas; for kvCache, the mean). */
  value: number;
  /** Requests routers hold for it (queued at zero replicas or while saturated). */
  queued: number;
}

/**
 * The replica count the load asks for, within [min, max]: load over the per-replica target,
 * rounded up, with the tolerance keeping a count that is close enough. Queued requests count
 * as in flight. At zero replicas, anything queued asks for one.
 */
export function recommendReplicas(policy: AutoscalePolicy, current: number, load: LoadSample): number {
  const clamp = (n: number): number => Math.min(policy.max, Math.max(policy.min, n));
  if (policy.metric === 'kvCache') {
    if (current === 0) return clamp(load.queued > 0 ? 1 : 0);
    const ratio = load.value / policy.target;
    if (Math.abs(ratio - 1) <= policy.tolerance) return clamp(current);
    return clamp(Math.ceil(current * ratio) + (load.queued > 0 ? 1 : 0));
  }
  const demand = load.value + load.queued;
  if (current === 0) return clamp(demand > 0 ? Math.ceil(demand / policy.target) || 1 : 0);
  const perReplica = demand / current;
  if (Math.abs(perReplica / policy.target - 1) <= policy.tolerance) return clamp(current);
  return clamp(Math.ceil(demand / policy.target));
}
