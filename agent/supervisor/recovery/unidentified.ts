// Processes no spec describes, at start and on every survey: strangers marked as this agent's
// are ended (they are ours and nobody can describe them); foreign processes on our GPUs are
// reported and their GPUs withheld, and ended only with `--foreign-gpu-processes kill`. In
// dry-run nothing at all is signalled: the report says what act mode would do. Agent side.
import { create } from '@bufbuild/protobuf';
import {
  ForeignProcessSchema,
  KillProcessesResultSchema,
  UnidentifiedProcessSchema,
  type ForeignProcess,
  type KillProcessesResult,
  type UnidentifiedProcess,
} from '../../../proto/gen/llmgw/v1/register_pb.js';
import type { SupervisorCore } from '../core.js';
import { scanMarked, type MarkedProcess } from '../processes/markers.js';
import { aliveIn, sameProcess } from '../processes/process-table.js';
import { foreignProcesses, markedStrangers, type Foreign, type GpuProcess } from './strangers.js';
import { terminate, type KillTarget } from '../stop/terminate.js';

export interface SurveyReport {
  /** Marked with this agent's node id, described by no readable spec: killed (or, in dry-run, would be). */
  unidentified: UnidentifiedProcess[];
  /** Compute processes on our GPUs that this agent did not start. */
  foreign: ForeignProcess[];
}

const DRY_RUN = 'dry run: act mode would kill it';

/**
 * Looks at every process no spec describes and acts as the agent's modes say. `gpuProcesses`
 * are the compute processes on the GPUs this agent manages (empty on simulated hosts).
 */
export async function survey(core: SupervisorCore, gpuProcesses: GpuProcess[], marked?: MarkedProcess[]): Promise<SurveyReport> {
  const found = marked ?? scanMarked(core.nodeId, core.launcher);
  const unidentified = await endStrangers(core, found);
  const foreign = await handleForeign(core, found, gpuProcesses);
  return { unidentified, foreign };
}

/** The foreign processes on our GPUs now, as a registration reports them; signals nothing. */
export function foreignNow(core: SupervisorCore, gpuProcesses: GpuProcess[]): ForeignProcess[] {
  if (gpuProcesses.length === 0) return [];
  const marked = scanMarked(core.nodeId, core.launcher);
  return foreignProcesses(core.launcher, gpuProcesses, core.nodeId, core.ourPids(marked)).map((f) =>
    foreignMessage(f, false, whatHappens(core, f)),
  );
}

async function endStrangers(core: SupervisorCore, marked: MarkedProcess[]): Promise<UnidentifiedProcess[]> {
  const strangers = markedStrangers(core.launcher, marked, new Set(core.shards.keys()), core.corrupt);
  if (strangers.length === 0) return [];
  for (const s of strangers) core.unidentifiedSeen.set(s.pid, s.startTicks);
  const message = (s: (typeof strangers)[number], killed: boolean, reason: string) =>
    create(UnidentifiedProcessSchema, { pid: s.pid, reason, gpuIndices: s.gpuIndices, command: s.command, killed });

  if (core.options.dryRun) {
    return strangers.map((s) => {
      core.log(`dry run: would kill pid ${s.pid}${s.shardId ? ` (LLMGW_SHARD_ID=${s.shardId})` : ''}: ${s.reason}`, 'warn');
      return message(s, false, `${s.reason} (${DRY_RUN})`);
    });
  }
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
    if (killed) core.count({ kind: 'kill', reason: 'unidentified' });
    return message(s, killed, s.reason);
  });
}

/** What the agent does about one foreign process, in the words the registration carries. */
function whatHappens(core: SupervisorCore, f: Foreign): string {
  const gpus = `GPU${f.gpuIndices.length === 1 ? '' : 's'} ${f.gpuIndices.join(',')}`;
  if (f.agent !== '') return `an engine of llmgw agent ${f.agent}: left alone; ${gpus} withheld from placement here`;
  if (core.options.foreignGpuProcesses !== 'kill')
    return `not started by llmgw: reported and left running; ${gpus} withheld from placement (--foreign-gpu-processes kill would end it)`;
  if (core.options.dryRun) return `not started by llmgw: ${DRY_RUN} (--foreign-gpu-processes kill); ${gpus} withheld meanwhile`;
  return `not started by llmgw: killed (--foreign-gpu-processes kill)`;
}

function foreignMessage(f: Foreign, killed: boolean, note: string): ForeignProcess {
  return create(ForeignProcessSchema, {
    pid: f.pid,
    gpuIndices: f.gpuIndices,
    command: f.command,
    usedMemoryMib: f.usedMemoryMib,
    killed,
    note,
  });
}

async function handleForeign(core: SupervisorCore, marked: MarkedProcess[], gpuProcesses: GpuProcess[]): Promise<ForeignProcess[]> {
  if (gpuProcesses.length === 0) return [];
  const found = foreignProcesses(core.launcher, gpuProcesses, core.nodeId, core.ourPids(marked));
  const kill = core.options.foreignGpuProcesses === 'kill' && !core.options.dryRun;
  const toKill = kill ? found.filter((f) => f.agent === '') : [];
  // Only the process itself: its group and parent are someone else's to judge.
  const targets: KillTarget[] = toKill.map((f) => ({ pid: f.pid, startTicks: f.startTicks, group: false }));
  const { survivors } = await terminate(core.launcher, targets, core.options.unidentifiedGraceMs);
  const survived = new Set(survivors.map((t) => t.pid));
  return found.map((f) => {
    const what = `pid ${f.pid} (${f.command}) on GPU(s) ${f.gpuIndices.join(',')}, ${f.usedMemoryMib} MiB`;
    if (!toKill.includes(f)) {
      core.log(`foreign process ${what}: ${whatHappens(core, f)}`, 'warn');
      return foreignMessage(f, false, whatHappens(core, f));
    }
    const killed = !survived.has(f.pid) && !sameProcess(core.launcher, f.pid, f.startTicks);
    if (killed) {
      core.count({ kind: 'kill', reason: 'foreign' });
      core.log(`killed foreign process ${what}: --foreign-gpu-processes kill`, 'warn');
      return foreignMessage(f, true, whatHappens(core, f));
    }
    core.log(`could not kill foreign process ${what}: still alive after SIGKILL`, 'warn');
    return foreignMessage(f, false, 'not started by llmgw: still alive after SIGKILL; its GPUs are withheld from placement');
  });
}

/**
 * Kills processes the control plane judged unidentifiable. Only processes marked with this
 * node id (and no shard we describe) or found unidentified earlier are ours to kill; our
 * shards' own processes are refused (stopShard ends those), and so is everything else. In
 * dry-run every pid is refused: the agent kills nothing at all.
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
      if (core.options.dryRun) {
        core.log(`dry run: would kill pid ${pid} (${reason}); this agent kills nothing in dry-run`, 'warn');
        result.refused.push(pid);
      } else targets.push({ pid, startTicks: stat.startTicks, group: false });
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
      core.count({ kind: 'kill', reason: 'control-plane' });
      result.killed.push(t.pid);
    }
  }
  return result;
}
