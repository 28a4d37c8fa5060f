// `llmgw up` (npm start): the whole local stack in one command. Flags here; the work in
// cli/actions/up.ts.
import type { Command } from 'commander';
import type { UpOptions } from '../actions/up.js';

export function register(program: Command): void {
  program
    .command('up')
    .description('the local stack in one command: dev server, control worker, router, two simulated 8×H100 agents, and the demo deployment')
    .option('--catalog <file>', 'catalog for the control worker', process.env.LLMGW_CATALOG ?? 'examples/catalog.yaml')
    .option('--router-port <port>', 'router port', '8080')
    .option('--replicas <n>', 'demo replicas (default 2; 1 with --real)')
    .option(
      '--real',
      'deploy Gemma 3 270M on llama.cpp (a real engine and model, built and assembled once per machine) instead of the fake demo',
    )
    .option('--port-offset <n>', 'added to every port the stack opens (Temporal, Web UI, router, agents, metrics, engines)', '0')
    .option('--node-prefix <prefix>', 'the simulated agents are <prefix>-a and <prefix>-b', 'sim')
    .action(async (opts: UpOptions) => {
      const { upCommand } = await import('../actions/up.js');
      await upCommand(opts);
    });
}
