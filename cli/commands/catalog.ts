// `llmgw catalog validate FILE`: check a catalog file before a worker loads it
// (catalog/validate-command.ts does the work).
import type { Command } from 'commander';

export function register(program: Command): void {
  const catalog = program.command('catalog').description('the catalog of models and engine profiles');
  catalog
    .command('validate')
    .argument('<file>', 'catalog YAML file')
    .description('check a catalog file; prints every error with its path and line, exits 1 when there is one')
    .action(async (file: string) => {
      const { validateCatalogCommand } = await import('../../catalog/validate-command.js');
      const result = validateCatalogCommand(file);
      (result.exitCode === 0 ? console.log : console.error)(result.output);
      process.exitCode = result.exitCode;
    });
}
