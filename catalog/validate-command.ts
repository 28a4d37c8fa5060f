// `llmgw catalog validate FILE`: checks a catalog the way the control worker will read it,
// and prints every problem at once with its path and line.
import { formatCatalogErrors, loadCatalogFile } from './load.js';

const SECRET_NAME = /TOKEN|SECRET|PASSWORD|API_KEY|ACCESS_KEY|CREDENTIAL/i;

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
  const lines = [`${file}: ${models} model${models === 1 ? '' : 's'}, ${profiles} profile${profiles === 1 ? '' : 's'}, OK`];
  // References are resolved by each agent at spawn: say which host variables agents need.
  const needed = new Map<string, string[]>();
  for (const model of result.catalog.models) {
    for (const profile of model.profiles) {
      for (const [name, value] of Object.entries(profile.env)) {
        if (typeof value === 'string') continue;
        const users = needed.get(value.fromHost) ?? [];
        users.push(`${model.name}/${profile.name} ${name}`);
        needed.set(value.fromHost, users);
      }
    }
  }
  // A literal value under a secret's name travels through Temporal in plaintext: say so.
  for (const model of result.catalog.models) {
    for (const profile of model.profiles) {
      for (const [name, value] of Object.entries(profile.env)) {
        if (typeof value === 'string' && SECRET_NAME.test(name)) {
          lines.push(
            `warning: ${model.name}/${profile.name} env ${name} is a literal value and travels in every StartShard; keep secrets on the hosts: ${name}: {fromHost: ${name}}`,
          );
        }
      }
    }
  }
  if (needed.size > 0) {
    lines.push('host variables the agents must be given (--pass-env NAME or --env-file FILE); their values never leave the host:');
    for (const [hostName, users] of [...needed].sort(([a], [b]) => a.localeCompare(b))) lines.push(`  ${hostName}: ${users.join(', ')}`);
  }
  return { exitCode: 0, output: lines.join('\n') };
}
