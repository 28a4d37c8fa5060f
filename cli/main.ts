// The `llmgw` command line: the ordered list of its commands. Each command registers itself,
// flags beside the action, in its own cli/commands/X.ts; its work is loaded only when it runs
// (cli/actions/, or the process's own folder), so `llmgw fake-engine` starts fast. To add a
// command: write cli/commands/X.ts exporting register(program), and list it below.
import { Command, Option } from 'commander';
import { failureMessage } from './errors.js';
import { profileOnSignal } from '../common/cpu-profile.js';
import * as agent from './commands/agent.js';
import * as batches from './commands/batches.js';
import * as catalog from './commands/catalog.js';
import * as deploy from './commands/deploy.js';
import * as engines from './commands/engines.js';
import * as fakeEngine from './commands/fake-engine.js';
import * as keygen from './commands/keygen.js';
import * as logs from './commands/logs.js';
import * as nodes from './commands/nodes.js';
import * as reconcile from './commands/reconcile.js';
import * as rollout from './commands/rollout.js';
import * as router from './commands/router.js';
import * as scale from './commands/scale.js';
import * as sim from './commands/sim.js';
import * as sleep from './commands/sleep.js';
import * as status from './commands/status.js';
import * as temporal from './commands/temporal.js';
import * as undeploy from './commands/undeploy.js';
import * as up from './commands/up.js';
import * as upgrade from './commands/upgrade.js';
import * as weights from './commands/weights.js';
import * as worker from './commands/worker.js';

profileOnSignal(process.argv[2] ?? 'llmgw');

// `llmgw --help` lists them in this order, under these headings: what a user does every day
// first, the processes an operator runs next, the simulators last.
const COMMANDS: [heading: string, commands: { register(program: Command): void }[]][] = [
  ['Deployments:', [up, deploy, status, scale, sleep, rollout, undeploy, logs]],
  ['Fleet operations:', [nodes, weights, batches, reconcile, upgrade, catalog, keygen]],
  ['Processes and what they run on:', [worker, agent, router, temporal, engines]],
  ['Development and simulation:', [fakeEngine, sim]],
];

const program = new Command();
program
  .name('llmgw')
  .description('Run LLM inference engines as Temporal-managed replicas on GPU hosts, behind one OpenAI-compatible endpoint.')
  .showHelpAfterError()
  .enablePositionalOptions();

for (const [heading, commands] of COMMANDS) {
  program.commandsGroup(heading);
  for (const command of commands) command.register(program);
}
program.commandsGroup('Help:').helpCommand(true);

program.addOption(new Option('--json', 'machine-readable output where supported').hideHelp());
// Answered in main() before parsing: the build id takes a bundle of the workflow code (async),
// and commander's own --version prints a fixed string.
program.option('-V, --version', 'print the release and the build id control workers of this install declare');

export async function main(argv: string[]): Promise<void> {
  try {
    if (argv[2] === '--version' || argv[2] === '-V') {
      const { versionCommand } = await import('./actions/version.js');
      return await versionCommand();
    }
    await program.parseAsync(argv);
  } catch (error) {
    console.error(`llmgw: ${failureMessage(error)}`);
    // Exit now: a long-running command that failed while starting may hold handles (a
    // Temporal Runtime, a half-started server) that would keep the process alive.
    process.exit(1);
  }
}

void main(process.argv);
