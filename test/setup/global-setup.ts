// vitest global setup: the tools the tests need, installed once per machine (install-tools.ts);
// one real Temporal dev server (the pinned CLI, built once per machine) for the whole run, on
// free ports, in memory, or the server TEMPORAL_ADDRESS names. LLMGW_SKIP_TEMPORAL=1 skips both
// for runs of pure unit tests. One catalog key for the whole run, too: test files share the dev
// server, so one file's worker may resolve a revision that another file's agent starts.
import type { TestProject } from 'vitest/node' with { 'resolution-mode': 'import' };
import { startDevServer, type DevServer } from '../../temporal/dev-server.js';
import { ensureTemporalCli } from '../../temporal/cli-binary.js';
import { findFreePort } from '../../common/ports.js';
import { ensureCatalogKeyFile } from '../../common/catalog-key.js';
import { ensureTestTools } from './install-tools.js';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

declare module 'vitest' {
  export interface ProvidedContext {
    temporalAddress: string;
    temporalBin: string;
    catalogKeyFile: string;
  }
}

let server: DevServer | undefined;

export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  const runDir = mkdtempSync(join(tmpdir(), 'llmgw-test-run-'));
  // Where test files record why they skip, for the closing summary (skip-summary.ts).
  process.env.LLMGW_TEST_SKIPS_FILE = join(runDir, 'skips.jsonl');
  const catalogKeyFile = join(runDir, 'catalog.key');
  ensureCatalogKeyFile(catalogKeyFile);
  project.provide('catalogKeyFile', catalogKeyFile);
  if (process.env.LLMGW_SKIP_TEMPORAL === '1') {
    project.provide('temporalAddress', '');
    project.provide('temporalBin', '');
    return async () => undefined;
  }
  await ensureTestTools((line) => console.log(line));
  const temporalBin = await ensureTemporalCli((line) => console.log(line));
  project.provide('temporalBin', temporalBin);
  if (process.env.TEMPORAL_ADDRESS) {
    project.provide('temporalAddress', process.env.TEMPORAL_ADDRESS);
    return async () => undefined;
  }
  const port = await findFreePort();
  const started = Date.now();
  server = await startDevServer({ temporalBin, port, headless: true, inMemory: true, logFile: `.llmgw/test/temporal-${port}.log` });
  console.log(`test harness: Temporal dev server on ${server.address} (pid ${server.pid}) ready in ${Date.now() - started} ms`);
  process.env.TEMPORAL_ADDRESS = server.address;
  project.provide('temporalAddress', server.address);
  return async () => {
    await server?.stop();
  };
}
