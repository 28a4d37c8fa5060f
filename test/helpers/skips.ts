// Why a test file skips, recorded for the run's closing summary (test/setup/skip-summary.ts):
// a file that cannot run here (not root, no network namespaces) calls skipReason() once at
// load, and the summary names every skipped test with that reason and what to run.
import { appendFileSync } from 'node:fs';
import { expect } from 'vitest';

/** Records `reason` for this test file (when there is one) and returns it, for `describe.skipIf`. */
export function skipReason(reason: string | undefined): string | undefined {
  if (reason === undefined) return undefined;
  const file = expect.getState().testPath ?? 'unknown file';
  console.warn(`${file}: skipped: ${reason}`);
  const log = process.env.LLMGW_TEST_SKIPS_FILE;
  if (log) appendFileSync(log, `${JSON.stringify({ file, reason })}\n`);
  return reason;
}

/** The reason tests need root, and what to run instead. */
export function needsRoot(what: string): string | undefined {
  return process.getuid?.() === 0 ? undefined : `${what} needs root: run \`sudo npm test\`, as CI does`;
}
