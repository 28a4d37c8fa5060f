// The replica workflow's input schema. A replica can be started by hand with the Temporal CLI,
// so its input crosses a trust boundary: it is validated here and a bad one fails the
// workflow with the path named, instead of a workflow task that fails for ever.
// Workflow side (pure zod).
import { z } from 'zod';
import { SafeName } from '../../common/safe-name.js';

const Count = z.int().min(1);

const EnvValue = z.union([z.string(), z.strictObject({ fromHost: z.string().min(1) })]);

export const ProfileSnapshotSchema = z.strictObject({
  model: SafeName('model'),
  modelSource: z.string().min(1),
  servedName: z.string().min(1),
  profile: z.string().min(1),
  engine: z.enum(['vllm', 'sglang', 'fake', 'llamacpp']),
  launcher: z.enum(['native', 'ray']),
  gpuClass: SafeName('gpuClass'),
  tensorParallel: Count,
  pipelineParallel: Count,
  gpusPerNode: Count,
  nodes: Count,
  args: z.array(z.string()),
  env: z.record(z.string(), EnvValue),
  startupTimeoutSeconds: Count,
  minGpuMemoryMib: z.int().min(0),
  /** The control worker's signature of this revision (docs/security.md); the agent checks it. */
  signature: z.string().optional(),
  /** A short digest naming the revision (shown by `llmgw status`). */
  revision: z.string().optional(),
  /** The catalog's source before it was pinned (kept at rollouts while the catalog still says it). */
  sourceAsWritten: z.string().optional(),
  /** The profile's sleep policy (common/sleep-types.ts, docs/sleep.md). */
  sleep: z
    .strictObject({
      afterSeconds: z.number().min(0),
      level: z.union([z.literal(1), z.literal(2)]),
      stopAfterSeconds: z.number().min(0).optional(),
      minAwakeSeconds: z.number().min(0),
    })
    .optional(),
});

const ShardPlacementSchema = z.strictObject({
  rank: z.int().min(0),
  nodeId: SafeName('nodeId'),
  shardId: z.string().min(1),
  gpuIndices: z.array(z.int().min(0)),
  hcas: z.array(z.string()),
  managementAddress: z.string(),
  httpPort: z.int().min(0),
  pid: z.int().min(0),
  state: z.string().optional(),
  ticket: z.string().optional(),
  attestation: z.string().optional(),
});

export const ReplicaInputSchema = z.strictObject({
  deployment: z
    .string()
    .regex(/^[a-z0-9][a-z0-9._-]{0,62}$/, 'deployment must be a deployment name (lowercase letters, digits, ".", "_", "-")'),
  seq: z.int().min(1),
  profile: ProfileSnapshotSchema,
  deploymentWorkflowId: z.string().min(1),
  drainGraceSeconds: z.number().min(0).optional(),
  drainTimeoutSeconds: z.number().min(0).optional(),
  labels: z.record(z.string(), z.string()).optional(),
  adopt: z.array(ShardPlacementSchema).optional(),
  carried: z.unknown().optional(),
  seal: z.string().max(200).optional(),
  upgrading: z.boolean().optional(),
  continueAsNewAfterEvents: z.int().min(10).optional(),
  capacityRecheckSeconds: z.number().min(1).optional(),
});
