// Registers llmgw's six search attributes: on the dev server through start-dev flags,
// on an existing cluster through `temporal operator search-attribute create`.
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { SEARCH_ATTRIBUTES } from '../common/names.js';

const execFileAsync = promisify(execFile);

/** `--search-attribute Name=Type` pairs for `temporal server start-dev`. */
export function devServerSearchAttributeFlags(): string[] {
  return Object.entries(SEARCH_ATTRIBUTES).flatMap(([name, type]) => ['--search-attribute', `${name}=${type}`]);
}

/**
 * Creates the attributes on a running cluster (self-hosted or Cloud through the
 * standard TEMPORAL_* settings, which the Temporal CLI reads itself). Attributes that
 * already exist with the right type are left alone, so this is safe to run again.
 */
export async function registerSearchAttributes(
  temporalBin: string,
  extraArgs: string[] = [],
  env: NodeJS.ProcessEnv = process.env,
): Promise<string[]> {
  const existing = await listSearchAttributes(temporalBin, extraArgs, env);
  const created: string[] = [];
  for (const [name, type] of Object.entries(SEARCH_ATTRIBUTES)) {
    const have = existing[name];
    if (have === type) continue;
    if (have) throw new Error(`search attribute ${name} exists with type ${have}, llmgw needs ${type}; remove it or use another namespace`);
    await execFileAsync(temporalBin, ['operator', 'search-attribute', 'create', '--name', name, '--type', type, ...extraArgs], {
      timeout: 30_000,
      env,
    });
    created.push(name);
  }
  return created;
}

export async function listSearchAttributes(
  temporalBin: string,
  extraArgs: string[] = [],
  env: NodeJS.ProcessEnv = process.env,
): Promise<Record<string, string>> {
  const { stdout } = await execFileAsync(temporalBin, ['operator', 'search-attribute', 'list', '--output', 'json', ...extraArgs], {
    timeout: 30_000,
    env,
  });
  const parsed: unknown = JSON.parse(stdout);
  const result: Record<string, string> = {};
  // The CLI prints { customAttributes: { Name: "INDEXED_VALUE_TYPE_KEYWORD" }, systemAttributes: {...} }.
  const custom = (parsed as { customAttributes?: Record<string, string> }).customAttributes ?? {};
  for (const [name, raw] of Object.entries(custom)) result[name] = normaliseType(raw);
  return result;
}

function normaliseType(raw: string): string {
  const bare = raw.replace(/^INDEXED_VALUE_TYPE_/, '').toLowerCase();
  const names: Record<string, string> = {
    keyword: 'Keyword',
    keyword_list: 'KeywordList',
    int: 'Int',
    text: 'Text',
    bool: 'Bool',
    double: 'Double',
    datetime: 'Datetime',
  };
  return names[bare] ?? raw;
}
