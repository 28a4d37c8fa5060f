// What an agent host tells Temporal by signal: each shard's transitions to its replica
// (transition-notifier.ts), and to node/<nodeId> the running shards and the weights held when
// those sets change, and "agent stopping". Agent side. Nothing is sent before Temporal answers (connect)
// or after the host dies (kill): a dead host says nothing more.
import type { Client } from '@temporalio/client';
import { nodeWorkflowId } from '../../common/names.js';
import type { LineLog } from '../../common/logger.js';
import type { HeldWeights } from '../../common/node-types.js';
import type { RunningShard, ShardStatus } from '../../proto/gen/llmgw/v1/shard_pb.js';
import { agentStoppingSignal, runningShardsSignal, weightsHeldSignal } from '../../workflows/definitions.js';
import { createTransitionNotifier } from './transition-notifier.js';
import { heldKey } from '../weights/weights-report.js';
import { createChangeReport, type ChangeReport } from './change-report.js';
import { runningShardIds, runningShardsKey } from './running-shards-report.js';

export interface NodeSignals {
  /** Temporal as this host reaches it now; undefined before connect and after kill. */
  client(): Client | undefined;
  connect(client: Client): void;
  /** A shard's transition: its replica is told, and the change reports look again. */
  transition(status: ShardStatus): void;
  /** A status for the replica alone (a drain gone idle, a stop for a GPU fault). */
  notify(status: ShardStatus): void;
  /** Starts the change reports over what the supervisor runs and the weights cache holds. */
  reportChanges(sources: { shards(): RunningShard[]; heldWeights(): HeldWeights[] }): void;
  /** What the weights cache holds may have changed (a fetch ended, an eviction). */
  weightsChanged(): void;
  /** The node registered with `runningShards`: the change reports start from what it was told. */
  registered(runningShards: RunningShard[]): void;
  /** An operator's stop: the node is NotReady now rather than after a heartbeat timeout. */
  stopping(reason: string): void;
  /** Death: from now on nothing is sent. */
  kill(): void;
  close(): void;
}

/** `signWeights`: the agent's signature over a weights report (agent/report-signer.ts); absent, it goes unsigned. */
export function createNodeSignals(nodeId: string, log: LineLog, signWeights?: (held: HeldWeights[]) => string): NodeSignals {
  let client: Client | undefined;
  let dead = false;
  const live = (): Client | undefined => (dead ? undefined : client);
  const node = () => live()?.workflow.getHandle(nodeWorkflowId(nodeId));
  const notifier = createTransitionNotifier(live, log);
  let shards: ChangeReport | undefined;
  let weights: ChangeReport | undefined;
  const warn = (line: string): void => log(line, 'warn');
  return {
    client: live,
    connect(c) {
      client = c;
    },
    transition(status) {
      notifier.send(status);
      shards?.changed();
      weights?.changed();
    },
    notify: (status) => notifier.send(status),
    reportChanges(sources) {
      const at = (): string => new Date().toISOString();
      shards = createChangeReport({
        what: 'running shards',
        read: () => runningShardIds(sources.shards()),
        key: runningShardsKey,
        send: async (shardIds) => node()?.signal(runningShardsSignal, { shardIds, at: at() }),
        log: warn,
        afterChangeMs: 1_000,
      });
      weights = createChangeReport({
        what: 'weights held',
        read: sources.heldWeights,
        key: heldKey,
        send: async (held) =>
          node()?.signal(weightsHeldSignal, { weights: held, at: at(), ...(signWeights ? { proof: signWeights(held) } : {}) }),
        log: warn,
        afterChangeMs: 500,
      });
    },
    weightsChanged() {
      weights?.changed();
    },
    registered(runningShards) {
      shards?.known(runningShardsKey(runningShardIds(runningShards)));
      // A registration may start a new node workflow, which knows of no holding (and a node
      // that never heard of any needs no empty report): tell it what the cache holds.
      weights?.known(heldKey([]));
      weights?.changed();
    },
    stopping(reason) {
      void node()
        ?.signal(agentStoppingSignal, { reason })
        .catch(() => undefined);
    },
    kill() {
      dead = true;
    },
    close() {
      shards?.close();
      weights?.close();
      notifier.close();
    },
  };
}
