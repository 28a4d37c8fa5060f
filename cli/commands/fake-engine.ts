// `llmgw fake-engine …`: the fake inference engine. It takes a vLLM-style argv as the agent
// hands it (fake-engine/options.ts parses it, skipping flags it does not use), so commander
// passes every argument through; --help is answered here, before the engine parses anything.
// fake-engine/usage.ts has no imports at run time, so listing its flags costs no start time.
import type { Command } from 'commander';
import { fakeEngineFlagsHelp } from '../../fake-engine/usage.js';

export function register(program: Command): void {
  program
    .command('fake-engine')
    .description('run the fake inference engine (vLLM surface, for demos, tests and benchmarks)')
    .helpOption(false)
    .allowUnknownOption()
    .allowExcessArguments()
    .passThroughOptions()
    .argument('[args...]', "the engine's flags")
    .addHelpText('after', fakeEngineFlagsHelp)
    .action(async (args: string[], _opts: unknown, command: Command) => {
      if (args.includes('--help') || args.includes('-h')) return command.help();
      const { runFakeEngine } = await import('../../fake-engine/main.js');
      await runFakeEngine(args);
    });
}
