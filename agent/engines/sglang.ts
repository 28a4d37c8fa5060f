// The command line for an SGLang shard: `python3 -m sglang.launch_server`, with SGLang's own
// multi-node flags when the replica spans hosts. Agent side; pure.
import { engineModelArg } from '../weights/cache-layout.js';
import { engineEnv } from './env.js';
import { invalidSpec, leaderAddress, type ShardPlan } from './plan.js';
import type { EngineContext, EngineLaunch } from './types.js';

const HEALTH_PATH = '/health';

export function sglangLaunch(plan: ShardPlan, ctx: EngineContext): EngineLaunch {
  const { profile } = plan;
  if (plan.nnodes > 1 && plan.launcher === 'ray') {
    // SGLang forms its own process group from --dist-init-addr; there is nothing for a
    // Ray cluster to do, and accepting the profile would hide a catalog mistake.
    throw invalidSpec(plan.spec, `profile ${profile.name} asks for Ray, but SGLang runs multi-node with its native launcher`);
  }

  const argv = [
    ...(ctx.pythonCommand ?? ['python3']),
    '-m',
    'sglang.launch_server',
    '--model-path',
    engineModelArg(profile.modelSource, ctx.weightsDir),
    '--served-model-name',
    profile.servedName,
    '--host',
    ctx.advertiseAddress,
    // Worker ranks serve no HTTP, but SGLang derives internal ports from --port on every
    // rank, so each is given the one its agent reserved.
    ...(plan.httpPort !== undefined ? ['--port', String(plan.httpPort)] : []),
    // Only rank 0 serves HTTP, so only it is given the certificate.
    ...(plan.rank === 0 && ctx.tls ? ['--ssl-certfile', ctx.tls.certFile, '--ssl-keyfile', ctx.tls.keyFile] : []),
    // SGLang's --tp is the size across all nodes, as the catalog's tensor_parallel is.
    '--tp',
    String(plan.tensorParallel),
    ...(plan.pipelineParallel > 1 ? ['--pp-size', String(plan.pipelineParallel)] : []),
    ...(plan.nnodes > 1
      ? ['--nnodes', String(plan.nnodes), '--node-rank', String(plan.rank), '--dist-init-addr', leaderAddress(plan)]
      : []),
    // Last, so a catalog entry can override any flag above.
    ...profile.args,
  ];

  return {
    processes: [{ role: 'engine', argv, env: engineEnv(plan.spec, ctx), blocking: true }],
    servesHttp: plan.rank === 0,
    healthPath: HEALTH_PATH,
  };
}
