// `llmgw deploy MODEL`: start a deployment, or change an existing one (its count, a rollout to
// another profile). The flags live here; the work, in cli/actions/deploy.ts.
import type { Command } from 'commander';
import type { DeployOptions } from '../actions/deploy.js';
import { jsonOption, rolloutPaceOptions, waitTimeoutOption, withOptions } from './options.js';

export function register(program: Command): void {
  const deploy = program
    .command('deploy')
    .argument('<model>', 'a model from the catalog')
    .description('deploy a model (or change the replica count of an existing deployment)')
    .option('--name <name>', 'deployment name (default: the model name)')
    .option('--replicas <n>', 'how many replicas (default 1; on an existing deployment, its count is kept unless given)')
    .option(
      '--profile <profile>',
      'catalog profile (default: the first, or the first for --gpu-class); on an existing deployment, rolls out to it',
    )
    .option('--rollout <auto|manual>', 'auto: a catalog edit to its profile rolls out by itself (default manual)');
  withOptions(deploy, rolloutPaceOptions('rollouts: '))
    .option('--gpu-class <class>', 'pick the first profile for this GPU class')
    .option(
      '--catalog <file>',
      "the control worker's catalog, to check the model and profile in before anything starts (default LLMGW_CATALOG, else the catalog of the `llmgw up` stack on this Temporal server; none known: the worker checks)",
    )
    .option('--no-catalog', "skip that check: the control worker's catalog decides")
    .option('--min-replicas <n>', 'autoscale on load: the fewest replicas (0: go Idle when unused, woken by the next request)')
    .option('--max-replicas <n>', 'autoscale on load: the most replicas')
    .option('--idle-to-zero <seconds>', 'with --min-replicas 0: go to zero after this long with no request')
    .option('--autoscale-metric <metric>', 'what autoscaling follows: inFlight (default), waiting or kvCache')
    .option('--autoscale-target <n>', 'per replica: requests in flight (default 8), waiting (2), or KV-cache use (0.8)')
    .option('--wait', "show each replica's progress and exit 0 when all are Ready, non-zero with the reason otherwise")
    .addOption(waitTimeoutOption(600))
    .addOption(jsonOption())
    .action(async (model: string, opts: DeployOptions) => {
      const { deployCommand } = await import('../actions/deploy.js');
      await deployCommand(model, opts);
    });
}
