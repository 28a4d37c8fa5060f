// Worker Versioning for the control worker: which Worker Deployment Version this build is,
// and making a version Current. Control side; used by `llmgw worker`, `llmgw upgrade` and tests.
//
// The build id names the workflow code, not the checkout: it is a hash of the workflow
// bundle's modules (sorted, so module order and the install path do not matter), prefixed
// with the package version. Two workers with the same workflow code are one version however
// they were installed; a change to any workflow, or to anything a workflow imports, is a new
// version, so long-running workflows stay pinned to the code that started them.
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { bundleWorkflowCode, type WorkflowBundle } from '@temporalio/worker';
import type { Client } from '@temporalio/client';
import { payloadConverterModulePath } from '../temporal/connection.js';

/** The Worker Deployment every llmgw control worker belongs to (overridable for tests). */
export const DEFAULT_DEPLOYMENT_NAME = 'llmgw';

export interface BuildVersion {
  deploymentName: string;
  buildId: string;
}

export interface VersionedBundle extends BuildVersion {
  bundle: WorkflowBundle;
}

const QUIET = { log() {}, info() {}, warn() {}, error() {}, debug() {}, trace() {} };

/** Bundles the workflows once and names the version they are. */
export async function bundleWithBuildId(options: {
  workflowsPath: string;
  deploymentName?: string;
  buildId?: string;
  /** Modules exporting `interceptors` (the upgrade test's second build). */
  interceptorModules?: string[];
}): Promise<VersionedBundle> {
  const { code } = await bundleWorkflowCode({
    workflowsPath: options.workflowsPath,
    workflowInterceptorModules: options.interceptorModules,
    payloadConverterPath: payloadConverterModulePath(),
    logger: QUIET,
    // Named module ids and no path comments: the bundle then holds no absolute path, and its
    // modules can be hashed independently of where the project is installed.
    webpackConfigHook: (config) => ({
      ...config,
      context: projectRoot(),
      output: { ...config.output, pathinfo: false },
      optimization: { ...config.optimization, moduleIds: 'named', chunkIds: 'named' },
    }),
  });
  return {
    bundle: { code },
    deploymentName: options.deploymentName ?? process.env.LLMGW_DEPLOYMENT_NAME ?? DEFAULT_DEPLOYMENT_NAME,
    buildId: options.buildId ?? process.env.LLMGW_BUILD_ID ?? `${packageVersion()}-${bundleHash(code)}`,
  };
}

/** A hash of the bundle's modules, each keyed by its path relative to the project. */
export function bundleHash(code: string): string {
  const modules = code
    .split(/^\/\*{3}\/ (?=")/m)
    .slice(1)
    .map((module) => module.replace(/\/\*{6}\/[\s\S]*$/, ''))
    .sort();
  return createHash('sha256')
    .update(modules.length ? modules.join('\n') : code)
    .digest('hex')
    .slice(0, 12);
}

function findPackage(): { root: string; version: string } {
  for (let dir = __dirname; dir !== dirname(dir); dir = dirname(dir)) {
    try {
      const pkg = JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8')) as { name?: string; version?: string };
      if (pkg.name === 'llmgw' && pkg.version) return { root: dir, version: pkg.version };
    } catch {
      // not here; look further up
    }
  }
  return { root: process.cwd(), version: '0.0.0' };
}

function packageVersion(): string {
  return findPackage().version;
}

/** Module names in the bundle are relative to this, so they are the same in every install. */
function projectRoot(): string {
  return findPackage().root;
}

export function versionName(version: BuildVersion): string {
  return `${version.deploymentName}:${version.buildId}`;
}

export interface DeploymentVersions {
  current: string | undefined;
  versions: { buildId: string; createdAt: string; drainage: string; status: string }[];
}

/** The deployment's Current version and every version it knows, oldest first; undefined if it has none yet. */
export async function describeDeployment(client: Client, deploymentName: string): Promise<DeploymentVersions | undefined> {
  try {
    const response = await client.workflowService.describeWorkerDeployment({ namespace: client.options.namespace, deploymentName });
    const info = response.workerDeploymentInfo;
    return {
      current: info?.routingConfig?.currentDeploymentVersion?.buildId || undefined,
      versions: (info?.versionSummaries ?? [])
        .map((summary) => ({
          buildId: summary.deploymentVersion?.buildId ?? '',
          createdAt: timestampText(summary.createTime),
          drainage: drainageText(summary.drainageInfo?.status),
          status: String(summary.status ?? ''),
        }))
        .sort((a, b) => a.createdAt.localeCompare(b.createdAt)),
    };
  } catch (error) {
    if (/not found/i.test(String(error))) return undefined;
    throw error;
  }
}

/**
 * Makes this version Current. The server refuses while no worker of the version has polled
 * the task queues the current version serves, so a version nobody runs never takes the
 * traffic; the call is retried briefly for the worker's first poll to register.
 */
export async function setCurrentVersion(client: Client, version: BuildVersion, timeoutMs = 30_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    try {
      await client.workflowService.setWorkerDeploymentCurrentVersion({
        namespace: client.options.namespace,
        deploymentName: version.deploymentName,
        buildId: version.buildId,
        identity: 'llmgw',
      });
      return;
    } catch (error) {
      if (Date.now() > deadline) throw new Error(`could not make ${versionName(version)} current: ${String(error)}`, { cause: error });
      await new Promise((resolve) => setTimeout(resolve, 500));
    }
  }
}

function timestampText(value: { seconds?: unknown } | null | undefined): string {
  const seconds = Number(value?.seconds ?? 0);
  return seconds ? new Date(seconds * 1000).toISOString() : '';
}

function drainageText(status: unknown): string {
  switch (Number(status ?? 0)) {
    case 1:
      return 'draining';
    case 2:
      return 'drained';
    default:
      return '';
  }
}

/** How often a worker looks that its deployment still has a Current version. */
const CURRENT_CHECK_MS = 15_000;

/**
 * A server that lost its data (or a namespace that was recreated) knows no Current version, and
 * then routes new workflows to no worker at all: whenever the deployment has none, this build
 * becomes it, as at a first install. A deployment with another Current version is left alone
 * (that is `llmgw upgrade`'s to change). Returns a stop.
 */
export function keepCurrentWhenNone(client: Client, version: BuildVersion, log: (line: string) => void): () => void {
  let checking = false;
  const timer = setInterval(() => {
    if (checking) return;
    checking = true;
    describeDeployment(client, version.deploymentName)
      .then(async (described) => {
        if (described?.current) return;
        await setCurrentVersion(client, version);
        log(`${versionName(version)} is now the Current version (the deployment had none: a new or emptied server)`);
      })
      .catch(() => undefined)
      .finally(() => (checking = false));
  }, CURRENT_CHECK_MS);
  timer.unref();
  return () => clearInterval(timer);
}
