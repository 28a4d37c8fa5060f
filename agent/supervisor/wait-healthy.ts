// Waiting for one shard to become Ready, for the agent's waitHealthy activity. Agent side:
// it listens to the supervisor's own state changes, so waiting costs no extra probes.
import { ApplicationFailure } from '@temporalio/common';
import { FailureType } from '../../common/failures.js';
import { ShardState, type ShardStatus } from '../../proto/gen/llmgw/v1/shard_pb.js';
import { failureLogLines } from './logs.js';
import { exitDetails, logsHint, type Shard } from './shard.js';

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
  const stateName = (shard: Shard | undefined) => (shard ? (ShardState[shard.state] ?? String(shard.state)) : 'gone');

  return new Promise<ShardStatus>((resolve, reject) => {
    const cleanups: (() => void)[] = [];
    let settled = false;
    const finish = (fn: () => void) => {
      if (settled) return;
      settled = true;
      for (const c of cleanups) c();
      fn();
    };

    const check = () => {
      if (view.closed()) {
        finish(() => reject(new Error(`the supervisor was closed while waiting for shard ${shardId}`)));
        return;
      }
      const shard = view.shard(shardId);
      if (!shard || shard !== first) {
        // Stopped (or stopped and started anew): this wait was for the engine that is gone.
        finish(() =>
          reject(
            ApplicationFailure.nonRetryable(`shard ${shardId} was stopped before it became healthy`, FailureType.EngineExited, { shardId }),
          ),
        );
        return;
      }
      if (shard.state === ShardState.READY) {
        finish(() => resolve(view.status(shard)));
        return;
      }
      if (shard.exited) {
        const last = shard.lastLogLines.length > 0 ? `; last log line (redacted): ${shard.lastLogLines.join(' ')}` : '';
        const hint = logsHint(shard.spec, view.nodeId);
        finish(() =>
          reject(
            ApplicationFailure.nonRetryable(
              `shard ${shardId}: ${shard.message}${last}; ${hint}`,
              FailureType.EngineExited,
              exitDetails(shard),
            ),
          ),
        );
      }
    };
    cleanups.push(view.onChange((id) => id === shardId && check()));

    const timer = setTimeout(() => {
      const shard = view.shard(shardId);
      const state = stateName(shard);
      const why = shard?.message ? `: ${shard.message}` : '';
      const hint = shard ? `; ${logsHint(shard.spec, view.nodeId)}` : '';
      finish(() =>
        reject(
          ApplicationFailure.nonRetryable(
            `shard ${shardId} did not become healthy within ${timeoutS} s (state ${state}${why})${hint}`,
            FailureType.StartupTimeout,
            {
              shardId,
              state,
              lastLogLines: shard ? failureLogLines(shard.logFile) : [],
            },
          ),
        ),
      );
    }, timeoutS * 1000);
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
      const onAbort = () => finish(() => reject(signal.reason));
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
