// `llmgw engines install llamacpp | status`: the real engine every machine can run, installed
// once per machine (docs/engines.md). The build itself lives with
// the agent's engines (agent/engines/llamacpp-binary.ts).
import type { Command } from 'commander';

const INSTALLABLE = ['llamacpp'];

export function register(program: Command): void {
  const engines = program.command('engines').description('engines this machine can run that llmgw installs itself (llama.cpp)');
  engines
    .command('install')
    .argument('<engine>', `the engine: ${INSTALLABLE.join(', ')}`)
    .description(
      'build llama-server once per machine from the pinned llama-cpp-python source into the engine cache, and assemble the Gemma 3 270M GGUF the example catalog serves',
    )
    .option('--no-model', 'the engine only, not the demo model')
    .action(async (engine: string, opts: { model: boolean }) => {
      if (!INSTALLABLE.includes(engine)) throw new Error(`llmgw engines install ${engine}: llmgw installs ${INSTALLABLE.join(', ')} only`);
      const { ensureLlamaServer } = await import('../../agent/engines/llamacpp-binary.js');
      const { ensureGemmaModel } = await import('../../common/gemma-gguf.js');
      const log = (line: string): void => console.error(line);
      console.log(`llama-server: ${await ensureLlamaServer(log)}`);
      if (opts.model) console.log(`gemma-3-270m: ${await ensureGemmaModel(log)}`);
    });
}
