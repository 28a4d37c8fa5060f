// `llmgw catalog validate FILE`: checks a catalog the way the control worker will read it,
// and prints every problem at once with its path and line.
import { formatCatalogErrors, loadCatalogFile } from './load.js';

export function validateCatalogCommand(file: string): { exitCode: 0 | 1; output: string } {
  const result = loadCatalogFile(file);
  if (!result.ok) {
    const count = result.errors.length;
    return {
      exitCode: 1,
      output: `${formatCatalogErrors(result.errors, file)}\n${file}: ${count} error${count === 1 ? '' : 's'}`,
    };
  }
  const models = result.catalog.models.length;
  const profiles = result.catalog.models.reduce((sum, model) => sum + model.profiles.length, 0);
  return {
    exitCode: 0,
    output: `${file}: ${models} model${models === 1 ? '' : 's'}, ${profiles} profile${profiles === 1 ? '' : 's'}, OK`,
  };
}
