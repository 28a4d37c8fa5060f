// Watching agents for free: every agent's Temporal worker heartbeats to the server every few
// seconds (not a billed action), and the control worker reads them with ListWorkers. A Ready
// node whose agent has gone silent is told (agentSilent: NotReady now, Lost after its grace),
// and told again when it is heard (agentHeard). Only transitions are signalled, so a healthy
// fleet costs no events; two control workers each tell, which the node takes once. Control side.
//
// This replaces a short presence heartbeat, which at a 30 s detection target costs about 150
// billed actions per host-hour; the presence activity stays as a slow backstop (and as the
// detector on servers without ListWorkers, where agents keep a short heartbeat).
import type { Client } from '@temporalio/client';
import { agentTaskQueue, nodeWorkflowId } from '../common/names.js';
import { agentHeardSignal, agentSilentSignal } from '../workflows/definitions.js';
import { lastHeartbeats, WorkerHeartbeatsUnsupported } from '../temporal/worker-heartbeats.js';

export interface LivenessOptions {
  /** How often to look (default 5 s). */
  everyMs?: number;
  /** No heartbeat for this long: the agent is silent (default 15 s: three missed 5 s beats). */
  silentAfterMs?: number;
}

export function watchAgentLiveness(client: Client, log: (line: string) => void, options: LivenessOptions = {}): () => void {
  const everyMs = options.everyMs ?? 5_000;
  const silentAfterMs = options.silentAfterMs ?? 15_000;
  const toldSilent = new Set<string>();
  /** When the sweeper first saw each node Ready without a heartbeat (an agent that never beat). */
  const firstSeen = new Map<string, number>();
  let running = false;
  let stopped = false;

  const tell = async (nodeId: string, silent: boolean, seconds: number): Promise<void> => {
    const handle = client.workflow.getHandle(nodeWorkflowId(nodeId));
    if (silent) await handle.signal(agentSilentSignal, { seconds });
    else await handle.signal(agentHeardSignal, {});
    log(`agent ${nodeId} ${silent ? `silent for ${seconds} s: told its node` : 'heard again: told its node'}`);
  };

  const sweep = async (): Promise<void> => {
    if (running || stopped) return;
    running = true;
    try {
      const beats = await lastHeartbeats(client, 'agent/');
      const now = Date.now();
      for await (const execution of client.workflow.list({ query: `WorkflowType = 'node' AND ExecutionStatus = 'Running'` })) {
        const nodeId = execution.workflowId.replace(/^node\//, '');
        const stateValue = execution.searchAttributes?.LlmgwState;
        const state = Array.isArray(stateValue) && typeof stateValue[0] === 'string' ? stateValue[0] : '';
        const last = beats.get(agentTaskQueue(nodeId));
        const age = last === undefined ? undefined : now - last;
        if (state === 'Ready' || state === 'Cordoned') {
          const since = firstSeen.get(nodeId) ?? now;
          firstSeen.set(nodeId, since);
          // An agent that never heartbeat (an older agent, a server that just started) gets longer.
          const silent = age !== undefined ? age > silentAfterMs : now - since > silentAfterMs * 4;
          if (silent && !toldSilent.has(nodeId)) {
            toldSilent.add(nodeId);
            await tell(nodeId, true, Math.round((age ?? now - since) / 1000)).catch(() => toldSilent.delete(nodeId));
          }
        } else {
          firstSeen.delete(nodeId);
        }
        if (toldSilent.has(nodeId) && age !== undefined && age <= silentAfterMs) {
          toldSilent.delete(nodeId);
          await tell(nodeId, false, 0).catch(() => toldSilent.add(nodeId));
        }
      }
    } catch (error) {
      if (error instanceof WorkerHeartbeatsUnsupported) {
        stopped = true;
        log('this Temporal server keeps no worker heartbeats (ListWorkers): agents are watched by their presence activity only');
      } else {
        log(`agent liveness: ${error instanceof Error ? error.message : String(error)}`);
      }
    } finally {
      running = false;
    }
  };

  const timer = setInterval(() => void sweep(), everyMs);
  timer.unref();
  void sweep();
  return () => {
    stopped = true;
    clearInterval(timer);
  };
}
