// Processes no spec describes: finding and ending the ones marked as this agent's (at start
// and on every survey), and killing on the control plane's request only what is ours to kill.
// Agent side.
import { create } from '@bufbuild/protobuf';
import {
  KillProcessesResultSchema,
  UnidentifiedProcessSchema,
  type KillProcessesResult,
  type UnidentifiedProcess,
} from '../../proto/gen/llmgw/v1/register_pb.js';
import { errorText, type SupervisorCore } from './core.js';
import { scanMarked, type MarkedProcess } from './markers.js';
import { aliveIn, sameProcess } from './process-table.js';
import { gpuStrangers, markedStrangers, type Stranger } from './strangers.js';
import { terminate, type KillTarget } from './terminate.js';

/** Finds and kills processes no spec describes (marked with this node id, or reported on our GPUs). */
export async function findUnidentified(core: SupervisorCore): Promise<UnidentifiedProcess[]> {
  return killStrangers(core, scanMarked(core.nodeId, core.launcher));
}

export async function killStrangers(core: SupervisorCore, marked: MarkedProcess[]): Promise<UnidentifiedProcess[]> {
  const described = new Set(core.shards.keys());
  const strangers: Stranger[] = markedStrangers(core.launcher, marked, described, core.corrupt);
  if (core.options.extraUnidentified) {
    const ours = core.ourPids(marked);
    for (const s of strangers) ours.add(s.pid);
    try {
      const found = await core.options.extraUnidentified();
      strangers.push(...gpuStrangers(core.launcher, found, core.nodeId, described, ours, (line) => core.log(line)));
    } catch (err) {
      core.log(`could not list the processes on this host's GPUs: ${errorText(err)}`, 'warn');
    }
  }
  if (strangers.length === 0) return [];
  for (const s of strangers) core.unidentifiedSeen.set(s.pid, s.startTicks);

  const { survivors } = await terminate(
    core.launcher,
    strangers.map((s) => s.target),
    core.options.unidentifiedGraceMs,
  );
  const survived = new Set(survivors.map((t) => t.pid));
  return strangers.map((s) => {
    // A group target's members are ended with it; only a survivor of its own keeps killed false.
    const killed = !survived.has(s.pid) && !sameProcess(core.launcher, s.pid, s.startTicks);
    const marker = s.shardId ? ` (LLMGW_SHARD_ID=${s.shardId})` : '';
    core.log(
      killed
        ? `killed pid ${s.pid}${marker}: ${s.reason}`
        : `could not kill pid ${s.pid}${marker} (${s.reason}): still alive after SIGKILL`,
      'warn',
    );
    return create(UnidentifiedProcessSchema, {
      pid: s.pid,
      reason: s.reason,
      gpuIndices: s.gpuIndices,
      command: s.command,
      killed,
    });
  });
}

/**
 * Kills processes the control plane judged unidentifiable. Only processes marked with this
 * node id (and no shard we describe) or found unidentified earlier are ours to kill; our
 * shards' own processes are refused (stopShard ends those), and so is everything else.
 */
export async function killOnRequest(core: SupervisorCore, pids: number[], reason: string): Promise<KillProcessesResult> {
  const { launcher } = core;
  const result = create(KillProcessesResultSchema, {});
  const skip = launcher.selfAndAncestors();
  const marked = scanMarked(core.nodeId, launcher);
  const ours = core.ourPids(marked);
  const markedByPid = new Map(marked.map((m) => [m.pid, m]));
  const targets: KillTarget[] = [];
  for (const pid of pids) {
    const stat = launcher.readStat(pid);
    if (!stat || !aliveIn(launcher, pid)) {
      result.alreadyGone.push(pid);
      continue;
    }
    const m = markedByPid.get(pid);
    const seen = core.unidentifiedSeen.get(pid) === stat.startTicks;
    if (skip.has(pid) || ours.has(pid)) {
      core.log(
        `refused to kill pid ${pid} (${reason}): it is ${skip.has(pid) ? 'this agent' : 'part of a shard this agent runs; stop the shard instead'}`,
      );
      result.refused.push(pid);
    } else if ((m && !core.shards.has(m.shardId)) || seen) {
      targets.push({ pid, startTicks: stat.startTicks, group: false });
    } else {
      core.log(`refused to kill pid ${pid} (${reason}): it carries no marker of agent ${core.nodeId}`);
      result.refused.push(pid);
    }
  }
  const { survivors } = await terminate(launcher, targets, core.options.unidentifiedGraceMs);
  const survived = new Set(survivors.map((t) => t.pid));
  for (const t of targets) {
    if (survived.has(t.pid)) {
      core.log(`could not kill pid ${t.pid} (${reason}): still alive after SIGKILL`, 'warn');
      result.refused.push(t.pid);
    } else {
      core.log(`killed pid ${t.pid}: ${reason}`, 'warn');
      result.killed.push(t.pid);
    }
  }
  return result;
}
