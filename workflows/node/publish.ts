// What a node shows and sends: its search attributes and details (phase, free GPUs, class), the
// memo of weights the host holds (placement reads it with the capacity index) and the news to
// its replicas, each held back while the run is parked for an upgrade. Workflow side.
import { upsertMemo, workflowInfo } from '@temporalio/workflow';
import { HELD_WEIGHTS_MEMO, SHARED_GPUS_MEMO, shownNodeState } from '../../common/node-types.js';
import { SA } from '../../common/search-attributes.js';
import { createPublication } from '../publish.js';
import { sharedGpusOf } from './shared-gpus.js';
import { freeGpus, heldWeightKeys, viewOf, type NodeState } from './state.js';

export interface NodeOutbox {
  /** Search attributes and details, from the state as it is now. */
  publish(): void;
  /** The held-weights memo, written only when the list changed (a fetch, an eviction). */
  publishWeights(): void;
  /** `tell`, held back while parked: the news goes out once the park ends. */
  heldWhileParked(tell: () => void): () => void;
  /** The park ended: send what was held back, in the order it always went out. */
  unpark(): void;
}

/**
 * While parked for an upgrade the run must issue nothing (workflows/upgrade.ts): what the
 * handlers would publish meanwhile is published once the park ends. A run continued from one
 * that already showed its state does not show it again.
 */
export function createNodeOutbox(state: NodeState, { parked, carried }: { parked: boolean; carried: boolean }): NodeOutbox {
  let holdCommands = parked;
  let publishPending = !carried || workflowInfo().searchAttributes?.LlmgwState === undefined;
  let memoPending = false;
  let tellPending = false;
  let tell: (() => void) | undefined;
  const shown = createPublication();
  const outbox: NodeOutbox = {
    publish() {
      if (holdCommands) {
        publishPending = true;
        return;
      }
      shown.attributes([
        { key: SA.state, value: shownNodeState({ ...state, enrolled: state.enrolled === true }) },
        { key: SA.freeGpus, value: freeGpus(state).length },
        { key: SA.gpuClass, value: state.inventory?.gpuClass || 'none' },
        { key: SA.nodes, value: [state.nodeId] },
      ]);
      shown.details(nodeDetails(state));
      // GPUs sleepers share, for placement of other sharers: written only when it changed, so a
      // node that has none (or whose sleepers stay put) writes nothing.
      const shared = sharedGpusOf(state).sharedGpus ?? [];
      const listed = workflowInfo().memo?.[SHARED_GPUS_MEMO];
      if (JSON.stringify(Array.isArray(listed) ? listed : []) !== JSON.stringify(shared)) upsertMemo({ [SHARED_GPUS_MEMO]: shared });
    },
    publishWeights() {
      const keys = heldWeightKeys(state);
      const listed = workflowInfo().memo?.[HELD_WEIGHTS_MEMO];
      if (JSON.stringify(Array.isArray(listed) ? listed : []) === JSON.stringify(keys)) return;
      if (holdCommands) memoPending = true;
      else upsertMemo({ [HELD_WEIGHTS_MEMO]: keys });
    },
    heldWhileParked(send) {
      tell = send;
      return () => {
        if (holdCommands) tellPending = true;
        else send();
      };
    },
    unpark() {
      holdCommands = false;
      if (publishPending) outbox.publish();
      if (memoPending || (carried && state.weights)) outbox.publishWeights();
      if (tellPending) tell?.();
    },
  };
  return outbox;
}

/** The Markdown the Web UI shows as the node's current details. */
export function nodeDetails(state: NodeState): string {
  const inv = state.inventory;
  const view = viewOf(state);
  const lines = [`**${state.nodeId}** — ${state.cordoned ? `${state.phase} (cordoned)` : shownNodeState(view)}: ${view.reason}`, ''];
  if (!inv) return lines.join('\n');
  lines.push(
    `${inv.gpus.length}× ${inv.gpuClass || 'no GPU'} on ${inv.hostname} (${inv.managementAddress}), ${freeGpus(state).length} free`,
    '',
  );
  if (inv.problems.length) lines.push(`Problems: ${inv.problems.join('; ')}`, '');
  if (state.weights?.length)
    lines.push(
      `Weights held: ${state.weights.map((w) => `\`${w.repo}@${w.commit.slice(0, 12)}\` (${Math.round(w.bytes / 1e6)} MB${w.inUseBy.length ? `, in use by ${w.inUseBy.join(', ')}` : ''})`).join('; ')}`,
      '',
    );
  lines.push('| GPU | NUMA | memory used | held by | problems |', '| --- | --- | --- | --- | --- |');
  for (const gpu of inv.gpus) {
    const holders = state.allocations.filter((allocation) => allocation.gpuIndices.includes(gpu.index));
    const held = holders.map(
      (h) => `${h.replicaId} (${h.shardId}${h.awakeShare === undefined ? '' : h.asleep ? ', asleep' : `, awake ${h.awakeShare}`})`,
    );
    lines.push(
      `| ${gpu.index} | ${gpu.numaNode} | ${gpu.memoryUsedMib}/${gpu.memoryTotalMib} MiB | ${held.join('; ') || '—'} | ${gpu.problems.join('; ') || '—'} |`,
    );
  }
  return lines.join('\n');
}
