// `llmgw sim-fleet`, `llmgw sim-ctl` and the hidden `sim-engines`: a simulated fleet in one process
// (sim/), for bench:fleet and the sim-fleet test.
import type { Command } from 'commander';

export function register(program: Command): void {
  program
    .command('sim-fleet')
    .description('N simulated GPU hosts in one process: the production agent per host, virtual engines, a control socket to kill hosts')
    .requiredOption('--hosts <n>', 'how many simulated hosts')
    .option(
      '--gpus <inventory>',
      'the inventory of every host (builtin:h100x8, builtin:a100x8, builtin:l40sx4, or a FILE)',
      'builtin:h100x8',
    )
    .option('--fabrics <names>', 'fabric labels given to the hosts in turn, e.g. ib-a,ib-b')
    .option('--state-dir <dir>', 'specs and logs of every host, the engine host and the sockets', '.llmgw/sim-fleet')
    .option('--node-prefix <p>', 'node ids are <p>0, <p>1, …', 'sim-')
    .option('--control-socket <path>', 'Unix socket taking kill, kill-agent, start, status, engines (default <state-dir>/control.sock)')
    .option('--port-base <port>', 'host i gets engine ports from port-base + i × ports-per-host', '20000')
    .option('--ports-per-host <n>', 'engine ports per host', '10')
    .option('--start-concurrency <n>', 'hosts started at once', '16')
    .option('--activity-pollers <n>', "activity pollers of each host's worker", '2')
    .option('--presence-heartbeat-seconds <s>', 'as for llmgw agent')
    .option('--lost-grace-seconds <s>', 'as for llmgw agent')
    .option('--reconcile-every-seconds <s>', 'as for llmgw agent')
    .option('--catalog-key <file>', 'as for llmgw agent (or LLMGW_CATALOG_PUBLIC_KEY_FILE, LLMGW_CATALOG_KEY_FILE)')
    .option('--insecure-unsigned', 'as for llmgw agent')
    .option('--metrics-addr <host:port|off>', 'one /metrics for the fleet, every host labelled llmgw_node (default off)')
    .action(async (opts: Record<string, unknown>) => {
      const { runSimFleet } = await import('../../sim/fleet.js');
      await runSimFleet({
        catalogKey: opts.insecureUnsigned
          ? undefined
          : process.env.LLMGW_CATALOG_PUBLIC_KEY_FILE || process.env.LLMGW_CATALOG_KEY_FILE || undefined,
        ...opts,
      });
    });

  program
    .command('sim-ctl')
    .description('send a command to a running sim-fleet: kill NODE…, kill-agent NODE…, start NODE…, status, engines')
    .argument('<words...>')
    .option('--control-socket <path>', "the fleet's control socket", '.llmgw/sim-fleet/control.sock')
    .action(async (words: string[], opts: { controlSocket: string }) => {
      const { controlRequest } = await import('../../sim/control.js');
      console.log(JSON.stringify(await controlRequest(opts.controlSocket, words.join(' ')), null, 2));
    });

  program
    .command('sim-engines', { hidden: true })
    .description("a simulated fleet's engine host (sim-fleet starts it)")
    .requiredOption('--socket <path>')
    .action(async (opts: { socket: string }) => {
      const { runEngineHost } = await import('../../sim/engines/host.js');
      await runEngineHost({ socket: opts.socket });
      process.exit(0);
    });
}
