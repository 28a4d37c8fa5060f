// Watching agents for free: every agent's Temporal worker heartbeats to the server every few
// seconds (not a billed action), and the control worker reads them with ListWorkers. A Ready
// node whose agent has gone silent is told (agentSilent: NotReady now, Lost after its grace),
// and told again when it is heard (agentHeard). Only transitions are signalled, so a healthy
// fleet costs no events; two control workers each tell, which the node takes once. Control side.
//
// This replaces a short presence heartbeat, which at a 30 s detection target costs about 150
// billed actions per host-hour; the presence activity stays as a slow backstop (and as the
// detector on servers without ListWorkers, where agents keep a short heartbeat).
//
// Each sweep also leaves a view of the whole fleet (how many agents are heard, how many are
// silent) for the node workflows' Lost decision (fleetSilence, activities/fleet-silence.ts):
// when most of the fleet goes silent at once, the cut is more likely on the control plane's
// side than on every host, and nothing is declared Lost (docs/failures.md).
import type { Client } from '@temporalio/client';
import { agentTaskQueue, nodeWorkflowId } from '../common/names.js';
import { agentHeardSignal, agentSilentSignal } from '../workflows/definitions.js';
import { queueBeats, WorkerHeartbeatsUnsupported } from '../temporal/worker-heartbeats.js';

export interface LivenessOptions {
  /** How often to look (default 2 s). */
  everyMs?: number;
  /** No new heartbeat for this long: the agent is silent (default 10 s: two missed 5 s beats). */
  silentAfterMs?: number;
  /** Each sweep's view of the fleet. */
  onView?: (view: FleetLiveness) => void;
}

/** Defaults: a host that stops is NotReady within about 12 s of its last heartbeat (docs/failures.md). */
export const LIVENESS_EVERY_MS = 2_000;
export const SILENT_AFTER_MS = 10_000;

/** One sweep's view of the registered fleet (nodes Ready, Cordoned or NotReady). */
export interface FleetLiveness {
  /** When the sweep was taken (ms since the epoch, the control worker's clock). */
  at: number;
  /** Nodes whose agent heartbeats now. */
  heard: string[];
  /** Nodes whose agent's worker stopped heartbeating without saying it was shutting down. */
  silent: string[];
}

/**
 * When each queue's newest heartbeat was last seen to change, by this process's clock. A
 * heartbeat's own time is the agent host's clock; measured against ours, a host whose clock is
 * behind by more than the silence threshold would look silent for ever. What counts is whether
 * a new heartbeat arrived, which needs no clock in common.
 */
export class HeartbeatAges {
  private readonly seen = new Map<string, { value: number; at: number; moved: boolean }>();
  private restart = false;

  /** Feeds one sweep's heartbeats (queue → heartbeat time) taken at `now`. */
  update(beats: Map<string, number>, now: number): void {
    if (this.restart) {
      this.restart = false;
      for (const known of this.seen.values()) Object.assign(known, { at: now, moved: false });
    }
    for (const [queue, value] of beats) {
      const known = this.seen.get(queue);
      // First seen: taken as fresh (at worst a dead agent is found silentAfter after we start).
      if (!known) this.seen.set(queue, { value, at: now, moved: false });
      else if (known.value !== value) this.seen.set(queue, { value, at: now, moved: true });
    }
  }

  /** How long since this queue's heartbeat last changed (or since we began to look), or undefined if it never beat. */
  age(queue: string, now: number): number | undefined {
    const known = this.seen.get(queue);
    return known ? now - known.at : undefined;
  }

  /** A new heartbeat arrived within `withinMs`: proof the agent is heard, not only that we just began to look. */
  heard(queue: string, now: number, withinMs: number): boolean {
    const known = this.seen.get(queue);
    return known !== undefined && known.moved && now - known.at <= withinMs;
  }

  /**
   * After a sweep that could not reach Temporal: the time we could not look says nothing about
   * the agents (they may not have reached it either), so every silence counts again from the
   * next sweep, and only a new heartbeat counts as heard.
   */
  forget(): void {
    this.restart = true;
  }
}

export function watchAgentLiveness(client: Client, log: (line: string) => void, options: LivenessOptions = {}): () => void {
  const everyMs = options.everyMs ?? LIVENESS_EVERY_MS;
  const silentAfterMs = options.silentAfterMs ?? SILENT_AFTER_MS;
  const ages = new HeartbeatAges();
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
      const beats = await queueBeats(client, 'agent/');
      const now = Date.now();
      ages.update(new Map([...beats].map(([queue, beat]) => [queue, beat.at])), now);
      const view: FleetLiveness = { at: now, heard: [], silent: [] };
      for await (const execution of client.workflow.list({ query: `WorkflowType = 'node' AND ExecutionStatus = 'Running'` })) {
        const nodeId = execution.workflowId.replace(/^node\//, '');
        const stateValue = execution.searchAttributes?.LlmgwState;
        const state = Array.isArray(stateValue) && typeof stateValue[0] === 'string' ? stateValue[0] : '';
        const queue = agentTaskQueue(nodeId);
        const age = ages.age(queue, now);
        const heard = ages.heard(queue, now, silentAfterMs);
        // A cordoned node counts as heard when heard, and not as silent: an operator who cordons
        // hosts known to be gone lets them turn Lost even while most of the fleet is silent.
        // An Unenrolled node is Ready but gets nothing placed: its liveness counts as a Ready one's.
        const ready = state === 'Ready' || state === 'Unenrolled';
        if (age !== undefined && (ready || state === 'Cordoned' || state === 'NotReady')) {
          if (heard) view.heard.push(nodeId);
          else if (age > silentAfterMs && state !== 'Cordoned' && !beats.get(queue)?.stopping) view.silent.push(nodeId);
        }
        if (ready || state === 'Cordoned') {
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
        if (toldSilent.has(nodeId) && heard) {
          toldSilent.delete(nodeId);
          await tell(nodeId, false, 0).catch(() => toldSilent.add(nodeId));
        }
      }
      options.onView?.(view);
    } catch (error) {
      ages.forget();
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
