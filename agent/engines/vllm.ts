// The command lines for a vLLM shard: `vllm serve` on one node, or a Ray cluster with
// `vllm serve --distributed-executor-backend ray` on rank 0 across several. Agent side; pure.
import { engineModelArg } from '../weights/cache-layout.js';
import { engineEnv } from './env.js';
import { invalidSpec, leaderHttpPort, type ShardPlan } from './plan.js';
import { rayLaunch } from './ray.js';
import type { EngineContext, EngineLaunch } from './types.js';

// vLLM's OpenAI server answers 200 here once the engine is up, and stops answering if the
// engine loop dies.
const HEALTH_PATH = '/health';

function serveArgv(plan: ShardPlan, ctx: EngineContext): string[] {
  const { profile } = plan;
  return [
    ...(ctx.vllmCommand ?? ['vllm']),
    'serve',
    // A fetched or shared-filesystem source runs from its local directory, never the hub.
    engineModelArg(profile.modelSource, ctx.weightsDir),
    '--served-model-name',
    profile.servedName,
    ...servingFlags(plan, ctx, leaderHttpPort(plan)),
  ];
}

/** Where a vLLM-style server listens and how it splits the model; the fake engine takes the same. */
export function servingFlags(plan: ShardPlan, ctx: EngineContext, port: number | undefined): string[] {
  return [
    '--host',
    ctx.advertiseAddress,
    ...(port !== undefined ? ['--port', String(port)] : []),
    '--tensor-parallel-size',
    String(plan.tensorParallel),
    '--pipeline-parallel-size',
    String(plan.pipelineParallel),
    // vLLM's (uvicorn's) own flags; the fake engine takes the same. Only where HTTP is served.
    ...(port !== undefined && ctx.tls ? ['--ssl-certfile', ctx.tls.certFile, '--ssl-keyfile', ctx.tls.keyFile] : []),
  ];
}

export function vllmLaunch(plan: ShardPlan, ctx: EngineContext): EngineLaunch {
  const env = engineEnv(plan.spec, ctx);
  // The profile's args come last so that a catalog entry can override any flag we set:
  // vLLM's parser keeps the last value given.
  const extra = plan.profile.args;

  if (plan.nnodes === 1) {
    return {
      processes: [{ role: 'engine', argv: [...serveArgv(plan, ctx), ...extra], env, blocking: true }],
      servesHttp: true,
      healthPath: HEALTH_PATH,
    };
  }

  switch (plan.launcher) {
    case 'native':
      // Without Ray, ranks > 0 would have to run vLLM's own headless workers, which this
      // agent does not launch; starting rank 0 alone would wait forever for its peers.
      throw invalidSpec(plan.spec, `profile ${plan.profile.name} runs vLLM on ${plan.nnodes} nodes, which needs the Ray launcher`);
    case 'ray':
      return rayLaunch(plan, ctx, env, () => serveArgv(plan, ctx), extra, HEALTH_PATH);
    default: {
      const unknown: never = plan.launcher;
      throw invalidSpec(plan.spec, `unknown launcher ${String(unknown)}`);
    }
  }
}
