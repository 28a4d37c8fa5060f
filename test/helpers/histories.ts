// Recording and loading workflow histories for the replay test. Tests call
// recordHistory after a run; with LLMGW_RECORD_HISTORIES=1 a history whose name is new is
// written to test/histories/<name>.json and committed, so later workflow changes are
// replayed against it. An existing history is never overwritten: histories are
// append-only (scripts/check-histories.mjs fails CI otherwise), so a changed workflow
// records its new behaviour under a new name and keeps replaying the old one.
import { existsSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { execFileSync } from 'node:child_process';
import { inject } from 'vitest';
import { temporalAddress } from './temporal.js';

export const HISTORIES_DIR = resolve(__dirname, '../histories');

/** Saves a workflow's history as the Temporal CLI prints it (the format the Web UI downloads). */
export function recordHistory(workflowId: string, baseName: string, address: string = temporalAddress()): void {
  if (process.env.LLMGW_RECORD_HISTORIES !== '1') return;
  // A later generation of the workflow code records beside the old one, never over it:
  // LLMGW_HISTORY_GENERATION=v1 names it `<name>.v1` when `<name>` exists.
  const generation = process.env.LLMGW_HISTORY_GENERATION;
  const existed = existsSync(join(HISTORIES_DIR, `${baseName}.json`));
  const name = existed && generation ? `${baseName}.${generation}` : baseName;
  if (existsSync(join(HISTORIES_DIR, `${name}.json`))) {
    console.log(`history ${name} exists and is append-only: not re-recorded (set LLMGW_HISTORY_GENERATION to add one beside it)`);
    return;
  }
  const json = execFileSync(
    inject('temporalBin'),
    ['workflow', 'show', '--workflow-id', workflowId, '--output', 'json', '--address', address],
    {
      encoding: 'utf8',
      maxBuffer: 64 * 1024 * 1024,
    },
  );
  mkdirSync(HISTORIES_DIR, { recursive: true });
  writeFileSync(join(HISTORIES_DIR, `${name}.json`), json);
  // Workflows read their own id (deployModel checks it), so replay must use the real one.
  writeFileSync(join(HISTORIES_DIR, `${name}.workflow-id`), `${workflowId}\n`);
}

/** Histories as the CLI wrote them; the worker's replayer parses the JSON itself. */
export function loadHistories(): { workflowId: string; name: string; history: unknown }[] {
  return readdirSync(HISTORIES_DIR)
    .filter((file) => file.endsWith('.json'))
    .sort()
    .map((file) => {
      const name = file.replace(/\.json$/, '');
      const idFile = join(HISTORIES_DIR, `${name}.workflow-id`);
      const workflowId = existsSync(idFile) ? readFileSync(idFile, 'utf8').trim() : name;
      return { workflowId, name, history: JSON.parse(readFileSync(join(HISTORIES_DIR, file), 'utf8')) as unknown };
    });
}
