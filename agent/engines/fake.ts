// The command lines for a fake-engine shard: vLLM's flags, our own multi-node flags for the
// native launcher, or the same Ray cluster a vLLM replica gets. Agent side; pure.
import { engineModelArg, localModelPath } from '../weights/cache-layout.js';
import { SIM_GPU_LEDGER_ENV } from '../../common/names.js';
import { engineEnv } from './env.js';
import { invalidSpec, leaderAddress, leaderHttpPort, type ShardPlan } from './plan.js';
import { rayLaunch } from './ray.js';
import { servingFlags } from './vllm.js';
import type { EngineContext, EngineLaunch } from './types.js';

// The fake engine answers 503 here until its simulated load is done, as vLLM's does not
// answer at all until it is.
const HEALTH_PATH = '/health';

function fakeArgv(plan: ShardPlan, ctx: EngineContext, port: number | undefined): string[] {
  const { profile } = plan;
  const weights = localModelPath(profile.modelSource, ctx.weightsDir);
  return [
    ...ctx.fakeEngineCommand,
    '--model',
    engineModelArg(profile.modelSource, ctx.weightsDir),
    '--served-model-name',
    profile.servedName,
    // The fake engine loads (and checks) the weights a real engine would be given.
    ...(weights !== undefined ? ['--weights', weights] : []),
    ...servingFlags(plan, ctx, port),
  ];
}

export function fakeLaunch(plan: ShardPlan, ctx: EngineContext): EngineLaunch {
  const env = engineEnv(plan.spec, ctx);
  if (ctx.simulatedGpuLedger !== undefined) env[SIM_GPU_LEDGER_ENV] = ctx.simulatedGpuLedger;
  const extra = plan.profile.args;

  if (plan.nnodes === 1) {
    return {
      processes: [{ role: 'engine', argv: [...fakeArgv(plan, ctx, leaderHttpPort(plan)), ...extra], env, blocking: true }],
      servesHttp: true,
      healthPath: HEALTH_PATH,
    };
  }

  switch (plan.launcher) {
    case 'native': {
      const leader = plan.rank === 0;
      const argv = [
        // Workers serve no HTTP: they only connect to the leader.
        ...fakeArgv(plan, ctx, leader ? leaderHttpPort(plan) : undefined),
        '--nnodes',
        String(plan.nnodes),
        '--node-rank',
        String(plan.rank),
        '--leader',
        leaderAddress(plan),
        ...extra,
      ];
      return { processes: [{ role: 'engine', argv, env, blocking: true }], servesHttp: leader, healthPath: HEALTH_PATH };
    }
    case 'ray':
      // The fake engine stands in for `vllm serve` on a real Ray cluster, so tests exercise
      // the head/worker start order and the wait for every node; it ignores the backend flag.
      return rayLaunch(plan, ctx, env, () => fakeArgv(plan, ctx, leaderHttpPort(plan)), extra, HEALTH_PATH);
    default: {
      const unknown: never = plan.launcher;
      throw invalidSpec(plan.spec, `unknown launcher ${String(unknown)}`);
    }
  }
}
