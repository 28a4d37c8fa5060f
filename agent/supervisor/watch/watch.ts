// Watching running shards: process exits, health probes while loading and once Ready, and
// the state transitions they cause. Agent side. Only transitions leave the agent (the
// replica hears about Ready, unhealthy and exited, never about each poll).
import { ShardState } from '../../../proto/gen/llmgw/v1/shard_pb.js';
import { hostPort } from '../../engines/plan.js';
import type { SupervisorCore } from '../core.js';
import { probeHealth, probeHost, type ProbeResult } from './health.js';
import { failureLogLines } from '../logs/logs.js';
import { sameProcess } from '../processes/process-table.js';
import { describeExit, type ProcessExit, type Shard, type ShardProcess } from '../shard.js';

export function onProcessExit(core: SupervisorCore, shard: Shard, proc: ShardProcess): void {
  const exit: ProcessExit = proc.exit ?? { code: null, signal: null };
  if (core.closed || core.shards.get(shard.spec.shardId) !== shard) return;
  const what = describeExit(proc.role, proc.pid, exit);
  if (shard.stopping) {
    core.log(`shard ${shard.spec.shardId}: ${what} (stopping)`);
    return;
  }
  if (shard.exited) return;
  markExited(core, shard, { message: what, exit });
  core.log(`shard ${shard.spec.shardId}: ${what}`);
  core.transitioned(shard);
}

export function markExited(core: SupervisorCore, shard: Shard, how: { message: string; exit?: ProcessExit }): void {
  shard.exited = true;
  shard.state = ShardState.FAILED;
  shard.message = how.message;
  if (how.exit?.code !== undefined && how.exit.code !== null) shard.exitCode = how.exit.code;
  shard.signal = how.exit?.signal ?? '';
  shard.lastLogLines = failureLogLines(shard.logFile);
  clearTimer(shard);
  core.count({ kind: 'exit' });
  core.emitChange(shard.spec.shardId);
}

export function watch(core: SupervisorCore, shard: Shard): void {
  scheduleTick(core, shard, 0);
}

function scheduleTick(core: SupervisorCore, shard: Shard, delayMs: number): void {
  clearTimer(shard);
  shard.timer = setTimeout(() => void tick(core, shard), delayMs);
  shard.timer.unref();
}

export function clearTimer(shard: Shard): void {
  if (shard.timer) clearTimeout(shard.timer);
  shard.timer = undefined;
}

function watching(core: SupervisorCore, shard: Shard): boolean {
  return !core.closed && !shard.exited && !shard.stopping && core.shards.get(shard.spec.shardId) === shard;
}

async function tick(core: SupervisorCore, shard: Shard): Promise<void> {
  shard.timer = undefined;
  if (!watching(core, shard)) return;
  // Adopted engines are not our children, so they cannot be waited on: watch by polling.
  if (shard.adopted) {
    const gone = shard.procs.find((p) => !sameProcess(core.launcher, p.pid, p.startTicks));
    if (gone) {
      markExited(core, shard, {
        message: `${gone.role} (pid ${gone.pid}) exited; its exit code is unknown because a previous agent started it`,
      });
      core.log(`shard ${shard.spec.shardId}: ${shard.message}`);
      core.transitioned(shard);
      return;
    }
  }
  if (shard.record.launch.servesHttp) {
    const result = await probeHealth(healthUrl(core, shard), core.options.healthTimeoutMs, shard.record.tlsFingerprint);
    if (!watching(core, shard)) return;
    applyProbe(core, shard, result);
  } else if (shard.state !== ShardState.READY && Date.now() - (shard.runningSince ?? 0) >= core.options.workerReadyAfterMs) {
    // A worker rank serves nothing we could probe; the engine itself joins the leader, and
    // the leader's health (rank 0) is what says the replica works.
    setState(core, shard, ShardState.READY, 'worker rank running; it joins the leader itself');
  }
  // While an engine loads, look more often: the moment it is healthy is the moment the
  // replica becomes routable. Once Ready, the steady interval is enough.
  const loading = shard.state !== ShardState.READY;
  const interval = core.options.healthIntervalMs;
  if (watching(core, shard)) scheduleTick(core, shard, loading ? Math.min(200, interval) : interval);
}

function healthUrl(core: SupervisorCore, shard: Shard): string {
  const host = probeHost(core.options.advertiseAddress);
  const scheme = shard.record.tlsFingerprint === undefined ? 'http' : 'https';
  return `${scheme}://${hostPort(host, shard.record.httpPort)}${shard.record.launch.healthPath}`;
}

function applyProbe(core: SupervisorCore, shard: Shard, result: ProbeResult): void {
  if (result.ok) {
    shard.healthFailures = 0;
    if (shard.state !== ShardState.READY)
      setState(core, shard, ShardState.READY, `healthy: ${shard.record.launch.healthPath} answered 200`);
    return;
  }
  switch (shard.state) {
    case ShardState.READY:
      shard.healthFailures += 1;
      if (shard.healthFailures >= core.options.unhealthyAfterFailures) {
        // The process is alive; whether to replace it is the replica workflow's call.
        setState(core, shard, ShardState.FAILED, `health check failing: ${result.error}`);
      }
      return;
    case ShardState.FAILED:
      shard.healthFailures += 1;
      return;
    default:
      // Still loading: a refused connection or a 503 is what loading looks like.
      return;
  }
}

function setState(core: SupervisorCore, shard: Shard, state: ShardState, message: string): void {
  if (shard.state === state) return;
  shard.state = state;
  shard.message = message;
  shard.lastLogLines = state === ShardState.FAILED ? failureLogLines(shard.logFile) : [];
  core.log(`shard ${shard.spec.shardId}: ${ShardState[state]}: ${message}`);
  core.emitChange(shard.spec.shardId);
  core.transitioned(shard);
}
