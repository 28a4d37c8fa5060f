// `llmgw deploy`'s look at the catalog before anything starts, so that an unknown model or
// profile is refused with the valid ones named rather than left behind as a Failed deployModel.
// Operator side. Only a catalog known to be the control worker's is read: the one --catalog or
// LLMGW_CATALOG names, or the one `llmgw up` gave the worker of the Temporal server this command
// talks to (recorded in .llmgw/up.json). Without one the worker's own check decides: a guess
// (a file that happens to be here) could refuse a model the worker serves.
import { readFileSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { loadCatalogFile, formatCatalogErrors } from '../../catalog/load.js';
import { chooseProfile, type ProfileRequest } from '../../catalog/lookup.js';
import { temporalConfig } from '../../temporal/connection.js';
import { CliError } from '../errors.js';

const UP_RECORD = join('.llmgw', 'up.json');

/** `llmgw up` says which catalog its worker reads, for the commands run beside it. */
export function recordUpCatalog(stateDir: string, temporalAddress: string, catalog: string): void {
  writeFileSync(join(stateDir, 'up.json'), `${JSON.stringify({ temporalAddress, catalog: resolve(catalog) })}\n`);
}

/** The catalog to check against, or undefined with --no-catalog or when none is known. */
export function catalogToCheck(flag: string | false | undefined): string | undefined {
  if (flag === false) return undefined;
  if (flag !== undefined) return flag;
  if (process.env.LLMGW_CATALOG) return process.env.LLMGW_CATALOG;
  try {
    const up = JSON.parse(readFileSync(UP_RECORD, 'utf8')) as { temporalAddress?: unknown; catalog?: unknown };
    if (up.temporalAddress === temporalConfig().address && typeof up.catalog === 'string') return up.catalog;
  } catch {
    // No `llmgw up` here, or another one's record: nothing is known.
  }
  return undefined;
}

export function checkAgainstCatalog(file: string | undefined, model: string, request: ProfileRequest): void {
  if (file === undefined) return;
  const loaded = loadCatalogFile(file);
  if (!loaded.ok) throw new CliError(`${formatCatalogErrors(loaded.errors, file)} (--no-catalog leaves the check to the control worker)`);
  const choice = chooseProfile(loaded.catalog, model, request);
  if (!choice.ok) {
    throw new CliError(
      `${choice.message} (catalog ${file}; --catalog names the one the control worker reads, --no-catalog skips this check)`,
    );
  }
}
