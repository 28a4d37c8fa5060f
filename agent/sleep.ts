// The agent's sleep calls on its own engines (SleepActivities, common/sleep-types.ts): vLLM's and
// the fake engine's dev endpoints (/sleep, /wake_up, /is_sleeping), llama-server's own idle sleep
// (read in /props, woken by any request that needs the model). Agent side: reached as the health
// probes reach engines, with the run's engine key and the TLS pin the agent issued.
import { ApplicationFailure } from '@temporalio/common';
import { request } from 'undici';
import { pinnedDispatcher } from '../common/engine-tls.js';
import { FailureType } from '../common/failures.js';
import type {
  ShardSleepState,
  SleepActivities,
  SleepShardRequest,
  SleepShardResult,
  WakeShardRequest,
  WakeShardResult,
} from '../common/sleep-types.js';
import { ENABLE_SLEEP_MODE_FLAG, LLAMA_SLEEP_FLAG, VLLM_DEV_MODE_ENV } from '../catalog/sleep.js';
import { Engine, type StartShard } from '../proto/gen/llmgw/v1/shard_pb.js';
import type { EngineAccess, Supervisor } from './supervisor/supervisor.js';

const QUICK_MS = 5_000;
/** A wake at level 2 reads the weights again: as long as a load may take. */
const SLOW_MS = 600_000;
const POLL_MS = 100;
/** llama-server falls asleep on its own clock: waited for this long past its idle time. */
const LLAMA_SLEEP_SLACK_S = 30;

type Kind = { engine: 'vllm' } | { engine: 'llamacpp'; idleSeconds: number };

/** The sleep activities over `supervisor`'s shards; agent/activities.ts wraps them with heartbeats. */
export function createSleepActivities(supervisor: Supervisor): SleepActivities {
  const levels = new Map<string, 1 | 2>();
  return {
    async sleepShard({ shardId, level }: SleepShardRequest): Promise<SleepShardResult> {
      const access = accessOf(supervisor, shardId);
      const kind = sleepKind(access);
      const started = performance.now();
      if (kind.engine === 'llamacpp') {
        // llama-server has no call to sleep: it sleeps itself once idle for its --sleep-idle-seconds.
        await until(access, kind, true, (kind.idleSeconds + LLAMA_SLEEP_SLACK_S) * 1000, 'fall asleep (requests keep it busy)');
        levels.set(shardId, 2);
        return { shardId, level: 2, tookMs: Math.round(performance.now() - started) };
      }
      // mode=wait: a request that arrived just before the idle timer fired is finished, not aborted.
      await call(access, 'POST', `/sleep?level=${level}&mode=wait`, SLOW_MS);
      await until(access, kind, true, QUICK_MS, 'report itself asleep');
      levels.set(shardId, level);
      return { shardId, level, tookMs: Math.round(performance.now() - started) };
    },

    async wakeShard({ shardId }: WakeShardRequest): Promise<WakeShardResult> {
      const access = accessOf(supervisor, shardId);
      const kind = sleepKind(access);
      const started = performance.now();
      if (!(await isSleeping(access, kind))) return { shardId, tookMs: 0 };
      if (kind.engine === 'llamacpp') {
        // Any request that needs the model wakes it; tokenizing one character is the cheapest.
        await call(access, 'POST', '/tokenize', SLOW_MS, { content: '.' });
      } else {
        await call(access, 'POST', '/wake_up', SLOW_MS);
      }
      await until(access, kind, false, SLOW_MS, 'wake');
      levels.delete(shardId);
      return { shardId, tookMs: Math.round(performance.now() - started) };
    },

    async shardSleepState({ shardId }: { shardId: string }): Promise<ShardSleepState> {
      const access = accessOf(supervisor, shardId);
      const sleeping = await isSleeping(access, sleepKind(access));
      const level = levels.get(shardId);
      return { shardId, sleeping, ...(sleeping && level !== undefined ? { level } : {}) };
    },
  };
}

function accessOf(supervisor: Supervisor, shardId: string): EngineAccess {
  const access = supervisor.engineAccess(shardId);
  if (!access) {
    throw ApplicationFailure.nonRetryable(`shard ${shardId} is not an engine this agent serves`, FailureType.ShardNotFound, { shardId });
  }
  return access;
}

/**
 * Whether a shard's engine is started able to sleep. Such shards may share a GPU (start-checks.ts):
 * the node workflow keeps no more of them awake there than fit, and an engine asked to wake on a
 * full GPU fails as CUDA's out-of-memory does.
 */
export function startsAbleToSleep(spec: StartShard): boolean {
  try {
    sleepKind({ spec, baseUrl: '' });
    return true;
  } catch {
    return false;
  }
}

/** Whether the engine was started able to sleep, and how; a non-retryable failure saying what to set otherwise. */
export function sleepKind(access: EngineAccess): Kind {
  const profile = access.spec.profile;
  const args = profile?.args ?? [];
  const engine = profile?.engine;
  if (engine === Engine.LLAMACPP) {
    const at = args.indexOf(LLAMA_SLEEP_FLAG);
    const idleSeconds = at >= 0 ? Number(args[at + 1]) : NaN;
    if (idleSeconds > 0) return { engine: 'llamacpp', idleSeconds };
    throw unsupported(access, `llama-server was started without ${LLAMA_SLEEP_FLAG}`);
  }
  if (engine === Engine.SGLANG) throw unsupported(access, 'engine sglang cannot sleep in llmgw');
  if (args.includes(ENABLE_SLEEP_MODE_FLAG) && profile?.env[VLLM_DEV_MODE_ENV] === '1') return { engine: 'vllm' };
  throw unsupported(access, `the engine was started without ${ENABLE_SLEEP_MODE_FLAG} and ${VLLM_DEV_MODE_ENV}=1`);
}

function unsupported(access: EngineAccess, why: string): ApplicationFailure {
  return ApplicationFailure.nonRetryable(
    `shard ${access.spec.shardId} cannot sleep: ${why}; give its profile "sleep: {afterSeconds: N}" in the catalog (it adds the flags) and roll the deployment out`,
    FailureType.SleepUnsupported,
    { shardId: access.spec.shardId },
  );
}

async function isSleeping(access: EngineAccess, kind: Kind): Promise<boolean> {
  const path = kind.engine === 'llamacpp' ? '/props' : '/is_sleeping';
  const body = (await call(access, 'GET', path, QUICK_MS)) as { is_sleeping?: unknown };
  return body.is_sleeping === true;
}

/** Polls until the engine says it sleeps (or not); a retryable failure after `timeoutMs`. */
async function until(access: EngineAccess, kind: Kind, sleeping: boolean, timeoutMs: number, what: string): Promise<void> {
  const deadline = performance.now() + timeoutMs;
  for (;;) {
    if ((await isSleeping(access, kind)) === sleeping) return;
    if (performance.now() > deadline) {
      throw ApplicationFailure.retryable(`shard ${access.spec.shardId}'s engine did not ${what} within ${Math.round(timeoutMs / 1000)} s`);
    }
    await new Promise((resolve) => setTimeout(resolve, POLL_MS));
  }
}

/** One call to the engine; its JSON answer (or {}), or a failure naming what it said. */
async function call(access: EngineAccess, method: 'GET' | 'POST', path: string, timeoutMs: number, json?: unknown): Promise<unknown> {
  const headers: Record<string, string> = {};
  if (access.key !== undefined) headers.authorization = `Bearer ${access.key}`;
  if (json !== undefined) headers['content-type'] = 'application/json';
  let status: number;
  let text: string;
  try {
    const res = await request(`${access.baseUrl}${path}`, {
      method,
      headers,
      ...(json !== undefined ? { body: JSON.stringify(json) } : {}),
      ...(access.pin !== undefined ? { dispatcher: pinnedDispatcher(access.pin) } : {}),
      headersTimeout: timeoutMs,
      bodyTimeout: timeoutMs,
    });
    status = res.statusCode;
    text = await res.body.text();
  } catch (err) {
    throw ApplicationFailure.retryable(`shard ${access.spec.shardId}: ${method} ${path}: ${(err as Error).message}`);
  }
  if (status === 200) return text === '' ? {} : (JSON.parse(text) as unknown);
  const said = engineMessage(text);
  if (/out of memory/i.test(said)) {
    throw ApplicationFailure.nonRetryable(`shard ${access.spec.shardId} cannot wake: ${said}`, FailureType.WakeOutOfMemory, {
      shardId: access.spec.shardId,
    });
  }
  throw ApplicationFailure.retryable(`shard ${access.spec.shardId}: ${method} ${path} answered ${status}: ${said}`);
}

/** The message of vLLM's error body, or the first 200 characters of whatever came. */
function engineMessage(text: string): string {
  try {
    const body = JSON.parse(text) as { message?: unknown; error?: { message?: unknown } | string };
    if (typeof body.message === 'string') return body.message;
    if (typeof body.error === 'object' && typeof body.error.message === 'string') return body.error.message;
  } catch {
    // Not JSON.
  }
  return text.slice(0, 200);
}
