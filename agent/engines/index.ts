// Turns a StartShard into the processes the agent spawns for it, for whichever engine the
// profile names. Agent side; pure: spawning, waiting and supervising happen elsewhere.
import { Engine, type StartShard } from '../../proto/gen/llmgw/v1/shard_pb.js';
import { fakeLaunch } from './fake.js';
import { llamacppLaunch } from './llamacpp.js';
import { invalidSpec, planShard, requireProfile } from './plan.js';
import { sglangLaunch } from './sglang.js';
import type { EngineContext, EngineLaunch } from './types.js';
import { vllmLaunch } from './vllm.js';

export type { EngineContext, EngineLaunch, EngineTlsFiles, ProcessRole, ProcessSpec } from './types.js';
export { engineEnv } from './env.js';
export { parseRayStatusNodeCount, rayStatusArgs } from './ray.js';

const VALID_ENGINES = 'vllm, sglang, fake, llamacpp';

/**
 * Throws a non-retryable ApplicationFailure of type InvalidSpec for a spec that can never
 * start (unknown engine, wrong GPU count, missing leader, …), naming the shard and the problem.
 */
export function buildEngineLaunch(spec: StartShard, ctx: EngineContext): EngineLaunch {
  const profile = requireProfile(spec);
  const engine = profile.engine;
  switch (engine) {
    case Engine.VLLM:
      return vllmLaunch(planShard(spec, profile, ctx), ctx);
    case Engine.SGLANG:
      return sglangLaunch(planShard(spec, profile, ctx), ctx);
    case Engine.FAKE:
      return fakeLaunch(planShard(spec, profile, ctx), ctx);
    case Engine.LLAMACPP:
      return llamacppLaunch(planShard(spec, profile, ctx), ctx);
    case Engine.UNSPECIFIED:
      throw invalidSpec(spec, `profile ${profile.name} names no engine; valid engines: ${VALID_ENGINES}`);
    default: {
      // A newer control plane may send an engine this agent does not know: refuse it
      // rather than guess at a command line.
      const unknown: never = engine;
      throw invalidSpec(spec, `profile ${profile.name} names unknown engine ${String(unknown)}; valid engines: ${VALID_ENGINES}`);
    }
  }
}
