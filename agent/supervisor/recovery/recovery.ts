// Recovery at agent start: takes over the engines a previous agent left running (same pid,
// watched by polling), reports those that died while no agent watched, and hands what no
// readable spec describes to unidentified.ts. Agent side; runs once, before any start.
import type { ForeignProcess, UnidentifiedProcess } from '../../../proto/gen/llmgw/v1/register_pb.js';
import { ShardState, type RunningShard } from '../../../proto/gen/llmgw/v1/shard_pb.js';
import { judgeRecord } from './adopt.js';
import { errorText, type SupervisorCore } from '../core.js';
import { adoptionLine, appendLogLine, failureLogLines } from '../logs/logs.js';
import { scanMarked, type MarkedProcess } from '../processes/markers.js';
import { mainProcess } from '../shard.js';
import {
  readAllRecords,
  removeStaleTempFiles,
  setAsideCorrupt,
  writeRecordAtomic,
  type ShardRecord,
  type UnreadableRecord,
} from '../spec-store.js';
import type { GpuProcess } from './strangers.js';
import { survey } from './unidentified.js';
import { watch } from '../watch/watch.js';

export interface RecoveryReport {
  adopted: RunningShard[];
  /** Shards whose engine died while no agent was watching: reported as Failed, record kept. */
  exited: RunningShard[];
  /** Marked as ours, described by no readable spec: killed (in dry-run: what act mode would kill). */
  unidentified: UnidentifiedProcess[];
  /** Compute processes on our GPUs that we did not start: reported, killed only in kill mode. */
  foreign: ForeignProcess[];
}

/**
 * Runs once at agent start, before anything else: adopts the engines a previous agent left
 * running, reports those that died meanwhile, kills marked processes nobody describes, and
 * sorts out the compute processes on our GPUs (`gpuProcesses`) that are not ours.
 */
export async function recover(core: SupervisorCore, gpuProcesses: GpuProcess[]): Promise<RecoveryReport> {
  if (core.recovered) throw new Error('recover() runs once, when the agent starts');
  core.recovered = true;
  const { stateDir } = core.options;
  for (const name of removeStaleTempFiles(stateDir)) core.log(`removed ${name}: a spec write a crash interrupted`);
  const { records, unreadable } = readAllRecords(stateDir);
  for (const u of unreadable) {
    core.corrupt.set(u.shardId, u.error);
    core.log(`spec file ${u.file} cannot be read: ${u.error}`, 'warn');
  }

  const marked = scanMarked(core.nodeId, core.launcher);
  const adopted: RunningShard[] = [];
  const exited: RunningShard[] = [];
  for (const record of records) {
    const outcome = recoverRecord(core, record, marked);
    const shard = core.shards.get(record.spec.shardId);
    if (!shard) continue;
    if (outcome === 'adopted') adopted.push(core.running(shard));
    else if (outcome === 'failed') exited.push(core.running(shard));
  }

  const { unidentified, foreign } = await survey(core, gpuProcesses, marked);
  setAsideCorruptRecords(core, unreadable);
  return { adopted, exited, unidentified, foreign };
}

function recoverRecord(core: SupervisorCore, record: ShardRecord, marked: MarkedProcess[]): 'adopted' | 'failed' | 'not-started' {
  const id = record.spec.shardId;
  const verdict = judgeRecord(core.launcher, record, marked);
  const shard = core.newShard(record);
  core.shards.set(id, shard);
  switch (verdict.kind) {
    case 'not-started':
      shard.state = ShardState.PENDING;
      shard.message = 'spec recorded but no engine was started (the agent stopped before spawning it); startShard starts it';
      core.log(`shard ${id}: ${shard.message}`);
      return 'not-started';
    case 'failed':
      shard.procs = verdict.processes.map((p) => ({ ...p }));
      shard.adopted = true;
      shard.exited = true;
      shard.state = ShardState.FAILED;
      shard.message = verdict.message;
      shard.lastLogLines = failureLogLines(shard.logFile);
      core.log(`shard ${id}: ${verdict.message}`);
      return 'failed';
    case 'alive': {
      shard.procs = verdict.processes.map((p) => ({ ...p }));
      shard.adopted = true;
      shard.state = record.launch.servesHttp ? ShardState.LOADING : ShardState.STARTING;
      shard.runningSince = Date.now();
      const now = new Date();
      record.processes = verdict.processes;
      record.adoptedAt = now.toISOString();
      try {
        writeRecordAtomic(core.options.stateDir, record);
      } catch (err) {
        // The engine is adopted all the same; only the adoption time is lost.
        core.log(`shard ${id}: could not rewrite its spec after adoption: ${errorText(err)}`, 'warn');
      }
      const pid = mainProcess(shard)?.pid ?? 0;
      try {
        appendLogLine(shard.logFile, adoptionLine(core.nodeId, pid, now));
      } catch (err) {
        core.log(`shard ${id}: could not write to ${shard.logFile}: ${errorText(err)}`, 'warn');
      }
      const found = verdict.foundUnrecorded
        ? ` (found pid ${verdict.foundUnrecorded.pid} by its markers: the previous agent died before recording it)`
        : '';
      core.log(`adopted shard ${id}: pid ${pid}${found}`);
      core.count({ kind: 'adopt' });
      watch(core, shard);
      return 'adopted';
    }
    default: {
      const unknown: never = verdict;
      throw new Error(`unknown recovery verdict ${JSON.stringify(unknown)}`);
    }
  }
}

function setAsideCorruptRecords(core: SupervisorCore, unreadable: UnreadableRecord[]): void {
  if (unreadable.length === 0) return;
  const stillMarked = new Set(scanMarked(core.nodeId, core.launcher).map((m) => m.shardId));
  for (const u of unreadable) {
    // Kept while something it may have described still runs: the next recovery tries again.
    if (stillMarked.has(u.shardId)) continue;
    try {
      const kept = setAsideCorrupt(u.file);
      core.log(`moved the unreadable spec file ${u.file} to ${kept}`);
    } catch (err) {
      core.log(`could not move the unreadable spec file ${u.file} aside: ${errorText(err)}`, 'warn');
    }
  }
}
