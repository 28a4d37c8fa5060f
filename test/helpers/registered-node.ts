// A node workflow's state after a host registered with it, made from what discovery found on the
// host (simulated or from recorded nvidia-smi output): the start of every placement test.
import { create } from '@bufbuild/protobuf';
import type { DiscoveredHost } from '../../agent/discovery/inventory.js';
import { RegisterSchema } from '../../proto/gen/llmgw/v1/register_pb.js';
import { applyRegister, initialNodeState, type NodeState } from '../../workflows/node/state.js';

/**
 * The state of node `nodeId` once its enrolled agent registered `host` at `now` (a registration
 * the control worker verified), managing every GPU it found.
 */
export function registeredNodeState(
  nodeId: string,
  host: DiscoveredHost,
  register: { managementAddress: string; labels?: Record<string, string> },
  now: string,
): NodeState {
  const state = initialNodeState(nodeId);
  const { gpus, fabrics, gpuClass, problems } = host;
  const managedGpus = gpus.map((gpu) => gpu.index);
  applyRegister(state, create(RegisterSchema, { nodeId, ...register, gpus, fabrics, gpuClass, managedGpus, problems }), now);
  state.enrolled = true;
  return state;
}
