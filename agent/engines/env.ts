// The environment of every process the agent starts for a shard: the profile's variables,
// then the agent's, which win. Agent side; pure.
import { ENGINE_MARKER_ENV } from '../../common/names.js';
import { Engine, type StartShard } from '../../proto/gen/llmgw/v1/shard_pb.js';
import type { EngineContext } from './types.js';
import { localModelPath } from '../weights/cache-layout.js';

/**
 * The agent's values are set after the profile's so a catalog entry cannot point an
 * engine at GPUs it was not given, nor strip the markers by which a restarted agent
 * recognises its own engines (an unmarked engine is killed as unidentifiable).
 */
export function engineEnv(spec: StartShard, ctx: EngineContext): Record<string, string> {
  const env: Record<string, string> = { ...(spec.profile?.env ?? {}) };

  // The indices come from nvidia-smi, which numbers GPUs in PCI bus order; CUDA numbers
  // them fastest-first unless told otherwise, and on a mixed host the two disagree.
  env.CUDA_DEVICE_ORDER = 'PCI_BUS_ID';
  // Set even when empty: an empty list hides every GPU, where an unset variable would
  // expose all of them, including those other shards hold.
  env.CUDA_VISIBLE_DEVICES = spec.gpuIndices.join(',');
  if (spec.hcas.length > 0) env.NCCL_IB_HCA = spec.hcas.join(',');
  const managementInterface = spec.managementInterface || ctx.managementInterface || '';
  if (managementInterface !== '') {
    // Bootstrap and Gloo traffic must take the interface the ranks can reach each other on,
    // not whichever one NCCL or Gloo happens to pick first.
    env.NCCL_SOCKET_IFNAME = managementInterface;
    env.GLOO_SOCKET_IFNAME = managementInterface;
  }
  // vLLM (and the Ray workers it places, which inherit the raylet's environment) would
  // otherwise guess the host's address, and guesses wrong on multi-homed GPU hosts.
  if (spec.profile?.engine === Engine.VLLM) env.VLLM_HOST_IP = ctx.advertiseAddress;

  // Weights llmgw fetched (or a shared filesystem holds) are read from disk: an engine that
  // reached for the hub would download from whatever a branch points at now.
  if (spec.profile && localModelPath(spec.profile.modelSource, ctx.weightsDir) !== undefined) env.HF_HUB_OFFLINE = '1';

  env[ENGINE_MARKER_ENV.nodeId] = spec.nodeId;
  env[ENGINE_MARKER_ENV.shardId] = spec.shardId;
  env[ENGINE_MARKER_ENV.replicaId] = spec.replicaId;
  return env;
}
