// The second half of a Ray launch: rank 0's engine starts only once `ray status` shows every
// node, so it is spawned in the background after startShard has returned (the other ranks,
// whose Ray workers complete the cluster, are started only after that). Agent side.
import { ApplicationFailure } from '@temporalio/common';
import { FailureType } from '../../../common/failures.js';
import { ShardState } from '../../../proto/gen/llmgw/v1/shard_pb.js';
import type { ProcessSpec } from '../../engines/index.js';
import { errorText, type SupervisorCore } from '../core.js';
import type { Shard } from '../shard.js';
import { recordPath } from '../spec-store.js';
import { spawnProcess, throwIfStartCut } from './start.js';
import { markExited } from '../watch/watch.js';

/**
 * The rest of a Ray launch: waits for the cluster, then spawns under the shard's lock, so
 * that a stop either comes first (and nothing is spawned) or after (and ends it too).
 * A failure ends the shard as exited, which waitHealthy and the replica see.
 */
export async function startAfterRay(core: SupervisorCore, shard: Shard, processes: ProcessSpec[], servesHttp: boolean): Promise<void> {
  const id = shard.spec.shardId;
  try {
    for (const p of processes) {
      if (p.waitForRayNodes !== undefined) await waitForRay(core, shard, p);
      await core.locks.run(id, async () => {
        throwIfStartCut(shard);
        if (shard.stopping || core.shards.get(id) !== shard) throw new Error('the shard was stopped');
        await core.options.beforeSpawn?.({ shardId: id, recordFile: recordPath(core.options.stateDir, id), process: p });
        await spawnProcess(core, shard, p);
      });
    }
    if (shard.exited || shard.stopping) return;
    shard.message = '';
    if (servesHttp && shard.state === ShardState.STARTING) shard.state = ShardState.LOADING;
    core.log(
      `started the ${processes.map((p) => p.role).join(', ')} of shard ${id}: ${shard.procs.map((p) => `${p.role} pid ${p.pid}`).join(', ')}`,
    );
    core.emitChange(id);
  } catch (err) {
    if (shard.exited || shard.stopping || core.shards.get(id) !== shard) return;
    markExited(core, shard, { message: `start failed: ${errorText(err)}` });
    core.log(`shard ${id}: ${shard.message}`);
    core.transitioned(shard);
  }
}

async function waitForRay(core: SupervisorCore, shard: Shard, p: ProcessSpec): Promise<void> {
  const spec = shard.spec;
  // The Ray wait (`ray status` until every node has joined) is the agent's, passed in as
  // options.waitForRay; the supervisor only sequences it between the head and the engine.
  const waitForRayNodes = core.options.waitForRay;
  if (!waitForRayNodes) {
    throw ApplicationFailure.nonRetryable(
      `shard ${spec.shardId}: its ${p.role} must wait for ${p.waitForRayNodes} Ray node(s), but this agent was started without a Ray wait`,
      FailureType.InvalidSpec,
    );
  }
  core.log(
    `shard ${spec.shardId}: waiting for ${p.waitForRayNodes} Ray node(s) at ${p.rayAddress ?? '(unknown address)'} before starting the ${p.role}`,
  );
  // The Ray head started just before may die while the wait polls: end the wait then, and
  // report the exit, rather than poll a cluster that is gone until the startup timeout.
  const wait = new AbortController();
  const onStop = (): void => wait.abort(shard.startAbort.signal.reason);
  const onChange = (id: string): void => {
    if (id === spec.shardId && shard.exited) wait.abort(new Error(shard.message));
  };
  shard.startAbort.signal.addEventListener('abort', onStop, { once: true });
  core.changes.on('change', onChange);
  try {
    if (shard.startAbort.signal.aborted) onStop();
    if (shard.exited) wait.abort(new Error(shard.message));
    await waitForRayNodes(spec, p, wait.signal);
  } catch (err) {
    throwIfStartCut(shard);
    throw err;
  } finally {
    shard.startAbort.signal.removeEventListener('abort', onStop);
    core.changes.off('change', onChange);
  }
}
