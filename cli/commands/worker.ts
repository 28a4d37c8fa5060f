// `llmgw worker`: the control worker (task queue llmgw), with its flags. The action loads
// workers/control-worker.ts on use, so other commands start without it.
import type { Command } from 'commander';

export function register(program: Command): void {
  program
    .command('worker')
    .description('run the control worker (task queue llmgw): the workflows and the control activities')
    .option(
      '--catalog <file>',
      'catalog YAML (or LLMGW_CATALOG); edits are picked up without a restart',
      process.env.LLMGW_CATALOG ?? 'examples/catalog.yaml',
    )
    .option(
      '--catalog-key <file>',
      'key file every resolved revision is signed with; agents start only signed revisions (or LLMGW_CATALOG_KEY_FILE)',
      process.env.LLMGW_CATALOG_KEY_FILE || undefined,
    )
    .option(
      '--metrics-addr <host:port|off>',
      'Prometheus /metrics: Temporal SDK and worker metrics (default LLMGW_METRICS_ADDR, else 127.0.0.1:9464)',
    )
    .option(
      '--build-id <id>',
      "this build's Worker Deployment build id (LLMGW_BUILD_ID; default: package version + a hash of the workflow code)",
    )
    .option('--deployment-name <name>', 'the Worker Deployment (LLMGW_DEPLOYMENT_NAME)', process.env.LLMGW_DEPLOYMENT_NAME ?? 'llmgw')
    .option(
      '--make-current',
      'make this build the Current version at start (default: only when there is none yet; otherwise `llmgw upgrade`)',
    )
    .option(
      '--trust-unenrolled-agents',
      'place on nodes whose agent key nobody enrolled (unsafe; or LLMGW_TRUST_UNENROLLED_AGENTS=1): only while a fleet of 0.2.0 agents, which sign nothing, is upgraded',
      process.env.LLMGW_TRUST_UNENROLLED_AGENTS === '1',
    )
    .action(
      async (opts: {
        catalog: string;
        trustUnenrolledAgents?: boolean;
        catalogKey?: string;
        metricsAddr?: string;
        buildId?: string;
        deploymentName: string;
        makeCurrent?: boolean;
      }) => {
        const { runControlWorker } = await import('../../workers/control-worker.js');
        await runControlWorker({
          catalogFile: opts.catalog,
          catalogKeyFile: opts.catalogKey,
          metricsAddr: opts.metricsAddr,
          buildId: opts.buildId,
          deploymentName: opts.deploymentName,
          makeCurrent: opts.makeCurrent,
          trustUnenrolledAgents: opts.trustUnenrolledAgents === true,
        });
      },
    );
}
