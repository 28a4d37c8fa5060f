// A profile's sleep policy in the catalog (`sleep:`), and the engine flags it adds: vLLM and the
// fake engine are started able to sleep (their dev endpoints), llama-server sleeps itself when
// idle. Pure; the control plane reads it, docs/sleep.md explains it.
import { z } from 'zod';
import type { SleepPolicy } from '../common/sleep-types.js';

/** `sleep: {afterSeconds, level, stopAfterSeconds, minAwakeSeconds}` on a profile. */
export const CatalogSleep = z.strictObject(
  {
    afterSeconds: z.int().min(1, 'sleep.afterSeconds must be at least 1'),
    level: z
      .union([z.literal(1), z.literal(2)], { error: 'sleep.level must be 1 (weights to host RAM) or 2 (weights dropped)' })
      .default(1),
    stopAfterSeconds: z.int().min(1, 'sleep.stopAfterSeconds must be at least 1').optional(),
    minAwakeSeconds: z.int().min(0, 'sleep.minAwakeSeconds must be >= 0').default(60),
  },
  {
    error: (issue) =>
      issue.code === 'unrecognized_keys'
        ? `unknown key${issue.keys.length > 1 ? 's' : ''} ${issue.keys.map((key) => `"${key}"`).join(', ')} in sleep (allowed: afterSeconds, level, stopAfterSeconds, minAwakeSeconds)`
        : undefined,
  },
);
export type CatalogSleep = z.infer<typeof CatalogSleep>;

/** vLLM serves /sleep, /wake_up and /is_sleeping only with this variable set (and --enable-sleep-mode). */
export const VLLM_DEV_MODE_ENV = 'VLLM_SERVER_DEV_MODE';
export const ENABLE_SLEEP_MODE_FLAG = '--enable-sleep-mode';
export const LLAMA_SLEEP_FLAG = '--sleep-idle-seconds';

/**
 * Why `engine` cannot sleep, or undefined when it can. SGLang has memory-release calls, but no
 * documentation of them as a served HTTP API that we could confirm; until then a sleep profile on
 * it is refused rather than silently never sleeping.
 */
export function sleepRefusal(engine: string): string | undefined {
  if (engine === 'sglang') {
    return 'engine sglang cannot sleep in llmgw (only vllm, fake and llamacpp can): remove sleep, or use scale to zero (autoscale min 0)';
  }
  return undefined;
}

/**
 * The flags and variables a sleep policy adds to the engine's own. They are in the profile's
 * args and env, so they are part of the revision (an engine must be started able to sleep);
 * the policy's timings are not, except llama-server's idle time, which is its own flag.
 */
export function sleepEngineArgs(engine: string, sleep: SleepPolicy | undefined): { args: string[]; env: Record<string, string> } {
  if (sleep === undefined) return { args: [], env: {} };
  switch (engine) {
    case 'vllm':
    case 'fake':
      return { args: [ENABLE_SLEEP_MODE_FLAG], env: { [VLLM_DEV_MODE_ENV]: '1' } };
    case 'llamacpp':
      return { args: [LLAMA_SLEEP_FLAG, String(sleep.afterSeconds)], env: {} };
    default:
      return { args: [], env: {} };
  }
}

/** The policy a snapshot carries: the catalog's, defaults filled in. */
export function sleepPolicy(sleep: CatalogSleep | undefined): SleepPolicy | undefined {
  if (sleep === undefined) return undefined;
  return {
    afterSeconds: sleep.afterSeconds,
    level: sleep.level,
    ...(sleep.stopAfterSeconds !== undefined ? { stopAfterSeconds: sleep.stopAfterSeconds } : {}),
    minAwakeSeconds: sleep.minAwakeSeconds,
  };
}
