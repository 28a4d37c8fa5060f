// `llmgw --version`: the release (package.json's version) and the build id that control
// workers of this install declare to Temporal's Worker Versioning, so an operator can tell
// which build a run is pinned to (`llmgw upgrade`, the Web UI) without starting a worker.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { bundleWithBuildId } from '../../workers/versioning.js';

/** The two lines `llmgw --version` prints. */
export async function versionText(): Promise<string> {
  // From dist/cli/actions/ to the package root, as `llmgw up` finds bin/llmgw.js.
  const pkg = JSON.parse(readFileSync(join(__dirname, '../../../package.json'), 'utf8')) as { version: string };
  // The build id is a hash of the workflow bundle: bundle what `llmgw worker` bundles (its
  // workflows and its workflow interceptors; workers/control-worker.ts) and name it the same
  // way, LLMGW_BUILD_ID and LLMGW_DEPLOYMENT_NAME included.
  const build = await bundleWithBuildId({
    workflowsPath: join(__dirname, '../../workflows/index.js'),
    interceptorModules: [require.resolve('../../workers/workflow-interceptors')],
  });
  return `llmgw ${pkg.version}\nworker build id ${build.buildId} (Worker Deployment ${build.deploymentName})`;
}

export async function versionCommand(): Promise<void> {
  console.log(await versionText());
}
