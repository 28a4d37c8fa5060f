// `llmgw nodes clear-gpu NODE GPU`, on the node workflow's side: the agent holds a GPU out
// for a fault it saw while serving (agent/gpu-health.ts) and is the one that must forget it;
// it then reports again, and the GPU is free in the node's inventory. Workflow side.
import { agentActivities } from '../toolkit.js';

export async function clearGpu(nodeId: string, gpuIndex: number): Promise<{ cleared: boolean; message: string }> {
  const { clearGpuFault } = agentActivities(nodeId, `clear GPU ${gpuIndex} on ${nodeId}`, {
    // An agent that is not there cannot forget: say so rather than wait.
    scheduleToStartTimeout: '15 seconds',
    startToCloseTimeout: '15 seconds',
    retry: { maximumAttempts: 1 },
  });
  const { cleared } = await clearGpuFault({ gpuIndex });
  return {
    cleared,
    message: cleared ? `GPU ${gpuIndex} on ${nodeId} is back in placement` : `GPU ${gpuIndex} on ${nodeId} was not held out`,
  };
}
