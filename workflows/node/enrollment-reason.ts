// What a node that no enrolled agent key vouches for says about itself: in `llmgw nodes`, the
// Web UI's details and a refused reserve. Workflow side, pure.
import type { NodeState } from './state.js';

export function unenrolledReason(state: Pick<NodeState, 'nodeId' | 'enrollment' | 'offeredKey'>): string {
  if (!state.enrollment)
    return `Unenrolled: run \`llmgw nodes enroll ${state.nodeId} ${state.offeredKey ?? '<key>'}\`${state.offeredKey ? '' : ' (the agent prints its key at start; agents before 0.3.0 have none)'}; nothing is placed here until then`;
  return `Unenrolled: key ${state.enrollment.publicKey} is enrolled, but no registration signed with it has come yet${state.offeredKey ? ` (the agent signs with ${state.offeredKey})` : ''}; nothing is placed here until one does`;
}
