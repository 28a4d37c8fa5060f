// Waiting for one shard to become Ready, for the agent's waitHealthy activity. Agent side:
// it listens to the supervisor's own state changes, so waiting costs no extra probes.
import { ApplicationFailure } from '@temporalio/common';
import { FailureType } from '../../../common/failures.js';
import { ShardState, type ShardStatus } from '../../../proto/gen/llmgw/v1/shard_pb.js';
import { failureLogLines } from '../logs/logs.js';
import { exitDetails, logsHint, type Shard } from '../shard.js';

export const DEFAULT_STARTUP_TIMEOUT_S = 600;

export interface WaitHealthyOptions {
  /** The activity's cancellation: rejects with its reason. */
  signal?: AbortSignal;
  heartbeat?: (details: { shardId: string; state: string; elapsedSeconds: number }) => void;
}

/** What the wait needs from the supervisor. */
export interface ShardView {
  nodeId: string;
  shard(shardId: string): Shard | undefined;
  closed(): boolean;
  /** Subscribes to state changes; returns the unsubscribe. */
  onChange(listener: (shardId: string) => void): () => void;
  status(shard: Shard): ShardStatus;
  heartbeatEveryMs: number;
}

const stateName = (shard: Shard | undefined): string => (shard ? (ShardState[shard.state] ?? String(shard.state)) : 'gone');

/** What the wait has come to: the shard is Ready, or the wait failed for good. */
type Outcome = { ready: ShardStatus } | { failed: unknown };

export function waitUntilReady(view: ShardView, shardId: string, timeoutSeconds: number, opts: WaitHealthyOptions): Promise<ShardStatus> {
  const first = view.shard(shardId);
  if (!first) {
    return Promise.reject(
      ApplicationFailure.nonRetryable(`shard ${shardId} is not known to agent ${view.nodeId}`, FailureType.ShardNotFound),
    );
  }
  const timeoutS =
    timeoutSeconds || first.spec.startupTimeoutSeconds || first.spec.profile?.startupTimeoutSeconds || DEFAULT_STARTUP_TIMEOUT_S;
  const startedAt = Date.now();

  return new Promise<ShardStatus>((resolve, reject) => {
    const cleanups: (() => void)[] = [];
    let settled = false;
    const finish = (outcome: Outcome): void => {
      if (settled) return;
      settled = true;
      for (const c of cleanups) c();
      if ('ready' in outcome) resolve(outcome.ready);
      else reject(outcome.failed);
    };
    const check = (): void => {
      const outcome = outcomeNow(view, shardId, first);
      if (outcome) finish(outcome);
    };
    cleanups.push(view.onChange((id) => id === shardId && check()));

    const timer = setTimeout(() => finish({ failed: timedOut(view, shardId, timeoutS) }), timeoutS * 1000);
    cleanups.push(() => clearTimeout(timer));

    if (opts.heartbeat) {
      const beat = opts.heartbeat;
      const interval = setInterval(() => {
        beat({ shardId, state: stateName(view.shard(shardId)), elapsedSeconds: Math.round((Date.now() - startedAt) / 1000) });
      }, view.heartbeatEveryMs);
      cleanups.push(() => clearInterval(interval));
    }

    if (opts.signal) {
      const signal = opts.signal;
      const onAbort = (): void => finish({ failed: signal.reason });
      if (signal.aborted) {
        onAbort();
        return;
      }
      signal.addEventListener('abort', onAbort, { once: true });
      cleanups.push(() => signal.removeEventListener('abort', onAbort));
    }
    check();
  });
}

/** What the shard's state says about the wait now; undefined while it is still starting. */
function outcomeNow(view: ShardView, shardId: string, first: Shard): Outcome | undefined {
  if (view.closed()) return { failed: new Error(`the supervisor was closed while waiting for shard ${shardId}`) };
  const shard = view.shard(shardId);
  if (!shard || shard !== first) {
    // Stopped (or stopped and started anew): this wait was for the engine that is gone.
    const message = `shard ${shardId} was stopped before it became healthy`;
    return { failed: ApplicationFailure.nonRetryable(message, FailureType.EngineExited, { shardId }) };
  }
  if (shard.state === ShardState.READY) return { ready: view.status(shard) };
  if (!shard.exited) return undefined;
  const last = shard.lastLogLines.length > 0 ? `; last log line (redacted): ${shard.lastLogLines.join(' ')}` : '';
  const message = `shard ${shardId}: ${shard.message}${last}; ${logsHint(shard.spec, view.nodeId)}`;
  return { failed: ApplicationFailure.nonRetryable(message, FailureType.EngineExited, exitDetails(shard)) };
}

function timedOut(view: ShardView, shardId: string, timeoutS: number): ApplicationFailure {
  const shard = view.shard(shardId);
  const state = stateName(shard);
  const why = shard?.message ? `: ${shard.message}` : '';
  const hint = shard ? `; ${logsHint(shard.spec, view.nodeId)}` : '';
  return ApplicationFailure.nonRetryable(
    `shard ${shardId} did not become healthy within ${timeoutS} s (state ${state}${why})${hint}`,
    FailureType.StartupTimeout,
    { shardId, state, lastLogLines: shard ? failureLogLines(shard.logFile) : [] },
  );
}
