// The deployModel input schema: plain JSON from `llmgw deploy`, the Temporal CLI or the
// Web UI's start form, validated here so every way in behaves the same.
import { z } from 'zod';
import { AutoscaleSchema } from '../../common/autoscale.js';
import { SafeName } from '../../common/safe-name.js';

export const DEPLOYMENT_NAME = /^[a-z0-9][a-z0-9._-]{0,62}$/;

export const DeployModelInputSchema = z
  .object({
    model: SafeName('model'),
    name: z.string().regex(DEPLOYMENT_NAME, 'name must be lowercase letters, digits, ".", "_" or "-" (at most 63)').optional(),
    profile: z.string().min(1).optional(),
    replicas: z
      .number({ error: 'replicas must be a number' })
      .int('replicas must be a whole number')
      .min(0, 'replicas must be ≥ 0')
      .optional(),
    autoscale: AutoscaleSchema.optional(),
    gpuClass: SafeName('gpuClass').optional(),
    labels: z.record(z.string(), z.string()).optional(),
    rebuilt: z.object({ reason: z.string() }).strict().optional(),
    /** auto: a catalog edit to its profile starts a rollout; manual (default): only `llmgw rollout`. */
    rollout: z.enum(['auto', 'manual'], { error: 'rollout must be "auto" or "manual"' }).optional(),
    maxSurge: z.int('maxSurge must be a whole number').min(0, 'maxSurge must be ≥ 0').optional(),
    maxUnavailable: z.int('maxUnavailable must be a whole number').min(0, 'maxUnavailable must be ≥ 0').optional(),
    carried: z.unknown().optional(),
    /** The control worker's MAC over the rest of a continued run's input (workflows/carried.ts). */
    seal: z.string().max(200).optional(),
    /** Set by the hand-over to a new llmgw build (workflows/upgrade.ts). */
    upgrading: z.boolean().optional(),
    /** Tests: hand over after this many history events. */
    continueAsNewAfterEvents: z.int().min(10).optional(),
  })
  .strict()
  .refine((input) => !(input.maxSurge === 0 && input.maxUnavailable === 0), {
    message: 'maxSurge and maxUnavailable cannot both be 0: a rollout could never start a new replica nor stop an old one',
    path: ['maxSurge'],
  });
