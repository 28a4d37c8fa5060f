// Recording and loading workflow histories for the replay test. Histories live by release
// (test/histories/<version>/): the folder of the release in progress (package.json's version) is
// recorded anew by `npm run record:histories`, which runs the tests that call recordHistory with
// LLMGW_RECORD_HISTORIES=1; a released folder is frozen (scripts/check-histories.mjs).
import { existsSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { execFileSync } from 'node:child_process';
import { inject } from 'vitest';
import { temporalAddress } from './temporal.js';

const ROOT = resolve(__dirname, '../..');
export const HISTORIES_ROOT = join(ROOT, 'test/histories');

export function versionInProgress(): string {
  return (JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { version: string }).version;
}

export function releasedVersions(): { version: string; commit: string }[] {
  return (JSON.parse(readFileSync(join(ROOT, 'releases.json'), 'utf8')) as { releases: { version: string; commit: string }[] }).releases;
}

/** Saves a workflow's history as the Temporal CLI prints it (the format the Web UI downloads). */
export function recordHistory(workflowId: string, name: string, address: string = temporalAddress()): void {
  if (process.env.LLMGW_RECORD_HISTORIES !== '1') return;
  const version = versionInProgress();
  if (releasedVersions().some((r) => r.version === version)) throw new Error(`${version} is released: its histories are frozen`);
  const dir = join(HISTORIES_ROOT, version);
  const json = execFileSync(
    inject('temporalBin'),
    ['workflow', 'show', '--workflow-id', workflowId, '--output', 'json', '--address', address],
    {
      encoding: 'utf8',
      maxBuffer: 64 * 1024 * 1024,
    },
  );
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, `${name}.json`), json);
  // Workflows read their own id (deployModel checks it), so replay must use the real one.
  writeFileSync(join(dir, `${name}.workflow-id`), `${workflowId}\n`);
}

export interface RecordedHistory {
  workflowId: string;
  /** `<version>/<name>`. */
  name: string;
  history: unknown;
}

/** The histories of one release folder (the release in progress by default). */
export function loadHistories(version: string = versionInProgress()): RecordedHistory[] {
  const dir = join(HISTORIES_ROOT, version);
  if (!existsSync(dir)) return [];
  return readdirSync(dir)
    .filter((file) => file.endsWith('.json'))
    .sort()
    .map((file) => {
      const name = file.replace(/\.json$/, '');
      const idFile = join(dir, `${name}.workflow-id`);
      const workflowId = existsSync(idFile) ? readFileSync(idFile, 'utf8').trim() : name;
      return { workflowId, name: `${version}/${name}`, history: JSON.parse(readFileSync(join(dir, file), 'utf8')) as unknown };
    });
}

/** The workflow type a recorded history ran (its first event). */
export function workflowTypeOf(recorded: RecordedHistory): string {
  const events = (recorded.history as { events?: { workflowExecutionStartedEventAttributes?: { workflowType?: { name?: string } } }[] })
    .events;
  return events?.[0]?.workflowExecutionStartedEventAttributes?.workflowType?.name ?? '';
}
