// Stopping a shard: SIGTERM to its process groups, SIGKILL after the grace, and its spec
// removed only once every process is gone. Agent side. Stopping is idempotent: an unknown
// shard is not an error, and marked leftovers of its id are still ours to end.
import { create } from '@bufbuild/protobuf';
import { ApplicationFailure } from '@temporalio/common';
import { FailureType } from '../../../common/failures.js';
import { isSafeShardId } from '../../../common/names.js';
import { StopShardResultSchema, type StopShard, type StopShardResult } from '../../../proto/gen/llmgw/v1/shard_pb.js';
import { sleep, type SupervisorCore } from '../core.js';
import { scanMarked } from '../processes/markers.js';
import { sameProcess } from '../processes/process-table.js';
import { mainProcess, type Shard } from '../shard.js';
import { removeRecord } from '../spec-store.js';
import { targetAlive, terminate, type KillTarget } from './terminate.js';
import { clearTimer } from '../watch/watch.js';

/**
 * SIGTERM to the shard's process groups, SIGKILL after the grace period; the spec record is
 * removed only once every process is gone. Stopping an unknown shard is not an error.
 */
export async function stop(core: SupervisorCore, req: StopShard): Promise<StopShardResult> {
  const id = req.shardId;
  if (!isSafeShardId(id)) {
    throw ApplicationFailure.nonRetryable(`shard id ${JSON.stringify(id)} cannot name a shard`, FailureType.InvalidInput);
  }
  // A start still waiting (for Ray) gives up rather than hold the lock through the stop.
  core.shards.get(id)?.startAbort.abort(new Error(`stop requested${req.reason ? `: ${req.reason}` : ''}`));
  return core.locks.run(id, () => stopLocked(core, req));
}

async function stopLocked(core: SupervisorCore, req: StopShard): Promise<StopShardResult> {
  const id = req.shardId;
  const { launcher } = core;
  const graceMs = (req.graceSeconds || core.options.stopGraceSeconds) * 1000;
  const shard = core.shards.get(id);
  if (!shard) {
    // Nothing recorded; marked leftovers of this id are still ours to end.
    const strays: KillTarget[] = scanMarked(core.nodeId, launcher)
      .filter((m) => m.shardId === id)
      .map((m) => ({ pid: m.pid, startTicks: m.startTicks, group: false }));
    if (strays.length > 0) await terminate(launcher, strays, graceMs);
    return create(StopShardResultSchema, { shardId: id, wasRunning: strays.length > 0 });
  }

  shard.stopping = true;
  clearTimer(shard);
  const targets = stopTargets(core, shard);
  const wasRunning = targets.some((t) => targetAlive(launcher, t));
  if (wasRunning) core.log(`stopping shard ${id}${req.reason ? ` (${req.reason})` : ''}: SIGTERM, SIGKILL after ${graceMs / 1000} s`);
  const { survivors, finalSignal } = await terminate(launcher, targets, graceMs);
  if (survivors.length > 0) {
    throw ApplicationFailure.retryable(
      `shard ${id}: pid(s) ${survivors.map((t) => t.pid).join(', ')} still alive after SIGKILL (stuck in the kernel?); its spec is kept until they are gone`,
    );
  }
  // Our own children's exit statuses arrive once they have been reaped.
  await Promise.race([Promise.all(shard.procs.map((p) => p.exited ?? Promise.resolve())), sleep(1000)]);

  removeRecord(core.options.stateDir, id);
  core.shards.delete(id);
  core.emitChange(id);

  const result = create(StopShardResultSchema, { shardId: id, wasRunning });
  const exit = mainProcess(shard)?.exit;
  if (exit) {
    if (exit.code !== null) result.exitCode = exit.code;
    result.signal = exit.signal ?? '';
  } else if (shard.exitCode !== undefined || shard.signal !== '') {
    if (shard.exitCode !== undefined) result.exitCode = shard.exitCode;
    result.signal = shard.signal;
  } else if (wasRunning) {
    // An adopted engine's exit status went to its real parent; say what ended it.
    result.signal = finalSignal;
  }
  core.log(`stopped shard ${id}${wasRunning ? '' : ' (nothing was running)'}`);
  return result;
}

/**
 * The shard's live process groups (each spawned process leads one), and any process marked
 * with this shard that escaped them (a helper that called setsid).
 */
export function stopTargets(core: SupervisorCore, shard: Shard): KillTarget[] {
  const targets: KillTarget[] = [];
  const groups = new Set<number>();
  for (const p of [...shard.procs].reverse()) {
    if (!sameProcess(core.launcher, p.pid, p.startTicks)) continue;
    targets.push({ pid: p.pgid, startTicks: p.startTicks, group: true });
    groups.add(p.pgid);
  }
  for (const m of scanMarked(core.nodeId, core.launcher)) {
    if (m.shardId !== shard.spec.shardId || groups.has(m.pgrp)) continue;
    targets.push({ pid: m.pid, startTicks: m.startTicks, group: false });
  }
  return targets;
}
