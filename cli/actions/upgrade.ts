// `llmgw upgrade`: moves a fleet's long-running workflows to a new control-worker build.
// Operator side; the workflow half is workflows/upgrade.ts, the steps are in docs/upgrades.md.
//
// 1. The target build (newest version of the Worker Deployment, or --build-id) becomes
//    Current: new workflows start on it at once.
// 2. Every running deployModel, replica, node and routes run pinned to another build is asked
//    to hand over (signal prepareUpgrade); each does so at its next safe point by continuing as new.
// 3. A new run that the server left on the old build parks; it is moved to the target with a
//    versioning override and released (signal upgradeApplied).
// Runs of builds older than the first release, and with --move-stranded runs whose build no
// worker serves, cannot hand over: they are ended and rebuilt by reconciliation instead
// (upgrade-pre-release.ts). It waits until every run is on the target or --timeout passes,
// and says which are not.
import { setTimeout as sleep } from 'node:timers/promises';
import { isGrpcServiceError, WorkflowNotFoundError, type Client } from '@temporalio/client';
import { status as GrpcStatus } from '@grpc/grpc-js';
import { describeDeployment, setCurrentVersion, type BuildVersion } from '../../workers/versioning.js';
import { prepareUpgradeSignal, upgradeAppliedSignal, upgradeStatusQuery } from '../../workflows/upgrade.js';
import { withClient } from './client.js';
import { predates } from '../../common/build-version.js';
import { endAndAdopt, firstRelease, type EndedRun } from './upgrade-pre-release.js';

const MOVABLE_TYPES = ['deployModel', 'replica', 'node', 'routes'];

export interface UpgradeOptions {
  buildId?: string;
  deploymentName: string;
  timeout: string;
  /** End runs pinned to builds no worker serves any more (dev stacks, lost workers); reconciliation adopts their engines. */
  moveStranded?: boolean;
}

type Pinned = EndedRun;

export async function upgradeCommand(options: UpgradeOptions): Promise<void> {
  await withClient(async (client) => {
    const code = await upgradeFleet(client, options, (line) => console.log(line));
    process.exitCode = code;
  });
}

export async function upgradeFleet(client: Client, options: UpgradeOptions, say: (line: string) => void): Promise<number> {
  const described = await describeDeployment(client, options.deploymentName);
  if (!described?.versions.length) {
    say(`Worker Deployment ${options.deploymentName} has no versions: start a control worker (llmgw worker) first`);
    return 1;
  }
  const target = options.buildId ?? described.versions[described.versions.length - 1]!.buildId;
  if (!described.versions.some((v) => v.buildId === target)) {
    say(
      `${options.deploymentName} has no version ${target}; it has ${described.versions.map((v) => v.buildId).join(', ')}. Start a worker of that build first.`,
    );
    return 1;
  }
  const version: BuildVersion = { deploymentName: options.deploymentName, buildId: target };
  if (described.current !== target) {
    await setCurrentVersion(client, version);
    say(`${options.deploymentName}:${target} is now Current (was ${described.current ?? 'none'}); new workflows start on it`);
  } else {
    say(`${options.deploymentName}:${target} is Current`);
  }

  const timeoutMs = parseSeconds(options.timeout) * 1000;
  const release = firstRelease();
  const elsewhere = await listPinnedElsewhere(client, options.deploymentName, target);
  const cannotHandOver = [
    ...(release ? elsewhere.filter((p) => predates(p.buildId, release)) : []),
    ...(options.moveStranded
      ? await stranded(
          client,
          elsewhere.filter((p) => !release || !predates(p.buildId, release)),
        )
      : []),
  ];
  if (cannotHandOver.length) {
    say(
      `${cannotHandOver.length} run(s) cannot hand over (${summarise(cannotHandOver)}): ending them; reconciliation adopts their engines`,
    );
    const why = `its build predates release ${release}, or no worker serves it`;
    await endAndAdopt(client, cannotHandOver, why, say, timeoutMs);
  }

  // Every run hears it: those pinned elsewhere hand over, those on the target ignore it.
  const woken = await signalAll(client, target);
  let pinned = await listPinnedElsewhere(client, options.deploymentName, target);
  if (!pinned.length && woken) {
    // A run that handed over at once is not listed until its first task completes: look again.
    await sleep(2_000);
    pinned = await listPinnedElsewhere(client, options.deploymentName, target);
  }
  if (!pinned.length) {
    say(`every deployModel, replica, node and routes run is on it already (${woken} asked to hand over if they run older code)`);
    return 0;
  }
  say(`${pinned.length} workflow(s) run on older builds: ${summarise(pinned)}; each hands over at its next safe point`);

  const deadline = Date.now() + timeoutMs;
  const all = pinned.map((p) => p.workflowId);
  const known = new Set(all);
  let pending = all;
  // Once every run looks moved, every one is looked at once more: a run just released from its
  // park may hand over again, and its successor starts on the old build and parks.
  let confirming = false;
  while (Date.now() < deadline) {
    // Listed again every round: visibility learns a new run's build only when its first task
    // completes, so a run that handed over just as it was listed shows up a round later.
    const listed = (await listPinnedElsewhere(client, options.deploymentName, target)).map((p) => p.workflowId);
    for (const workflowId of listed) {
      if (known.has(workflowId)) continue;
      known.add(workflowId);
      all.push(workflowId);
    }
    const still: string[] = [];
    for (const workflowId of new Set([...pending, ...listed])) {
      if ((await stepOne(client, workflowId, version)) !== 'done') still.push(workflowId);
    }
    if (!still.length && confirming) {
      pending = [];
      break;
    }
    confirming = !still.length;
    pending = still.length ? still : all;
    await sleep(1_000);
  }
  const moved = all.length - pending.length;
  say(`${moved} of ${all.length} moved to ${target}`);
  if (pending.length) {
    say(`not yet moved: ${pending.join(', ')}`);
    say(
      'They hand over at their next safe point (a replica between steps, a deployment between changes); run `llmgw upgrade` again to finish. Keep the old workers running until none is left.',
    );
    return 2;
  }
  say(
    `done: the old build's workers can be stopped once \`temporal worker deployment describe --name ${options.deploymentName}\` shows it drained`,
  );
  return 0;
}

/**
 * Moves one workflow a step further; 'done' once its current run is on the target and not parked.
 * Everything after the describe talks to that one run: if it continues as new meanwhile, the
 * next round finds its successor instead of releasing a park that was never moved.
 */
async function stepOne(client: Client, workflowId: string, version: BuildVersion): Promise<'done' | 'waiting'> {
  let description;
  try {
    description = await client.workflow.getHandle(workflowId).describe();
  } catch (error) {
    // Gone is done; anything else (a busy server) is asked again next round.
    return error instanceof WorkflowNotFoundError ? 'done' : 'waiting';
  }
  if (description.status.name !== 'RUNNING') return 'done';
  const run = client.workflow.getHandle(workflowId, description.runId);
  const info = description.raw.workflowExecutionInfo?.versioningInfo;
  const onTarget =
    info?.deploymentVersion?.buildId === version.buildId || info?.versioningOverride?.pinned?.version?.buildId === version.buildId;
  const status = await run.query(upgradeStatusQuery).catch(() => undefined);
  if (status?.parked) {
    if (onTarget || (await pinTo(client, workflowId, description.runId, version))) {
      await run.signal(upgradeAppliedSignal).catch(() => undefined);
    }
    return 'waiting';
  }
  // A run that did not answer may be parked all the same: only an answer says it is not.
  return onTarget && status ? 'done' : 'waiting';
}

/** Pins one run to the target; false when that run has ended meanwhile (continued as new). */
async function pinTo(client: Client, workflowId: string, runId: string, version: BuildVersion): Promise<boolean> {
  try {
    await client.workflowService.updateWorkflowExecutionOptions({
      namespace: client.options.namespace,
      workflowExecution: { workflowId, runId },
      workflowExecutionOptions: {
        // PINNED_OVERRIDE_BEHAVIOR_PINNED
        versioningOverride: { pinned: { behavior: 1, version: { deploymentName: version.deploymentName, buildId: version.buildId } } },
      },
      updateMask: { paths: ['versioning_override'] },
    });
    return true;
  } catch (error) {
    if (isGrpcServiceError(error) && error.code === GrpcStatus.NOT_FOUND) return false;
    throw error;
  }
}

async function signalAll(client: Client, target: string): Promise<number> {
  const types = MOVABLE_TYPES.map((t) => `'${t}'`).join(', ');
  let count = 0;
  for await (const execution of client.workflow.list({ query: `ExecutionStatus = 'Running' AND WorkflowType IN (${types})` })) {
    await client.workflow
      .getHandle(execution.workflowId)
      .signal(prepareUpgradeSignal, { buildId: target })
      .catch(() => undefined);
    count++;
  }
  return count;
}

async function listPinnedElsewhere(client: Client, deploymentName: string, target: string): Promise<Pinned[]> {
  const types = MOVABLE_TYPES.map((t) => `'${t}'`).join(', ');
  const query = `ExecutionStatus = 'Running' AND WorkflowType IN (${types}) AND TemporalWorkerDeploymentVersion != '${deploymentName}:${target}'`;
  const found: Pinned[] = [];
  for await (const execution of client.workflow.list({ query })) {
    const version = execution.searchAttributes?.TemporalWorkerDeploymentVersion;
    const text = Array.isArray(version) && typeof version[0] === 'string' ? version[0] : '';
    found.push({
      workflowId: execution.workflowId,
      type: execution.type,
      buildId: text.replace(`${deploymentName}:`, '') || 'unversioned',
    });
  }
  return found;
}

/** Runs that do not answer a query (no worker serves their build): they can never reach a safe point. */
async function stranded(client: Client, runs: Pinned[]): Promise<Pinned[]> {
  const answers = await Promise.all(
    runs.map((run) =>
      client.workflow
        .getHandle(run.workflowId)
        .query(upgradeStatusQuery)
        .then(() => true)
        .catch(() => false),
    ),
  );
  return runs.filter((_, i) => !answers[i]);
}

function summarise(pinned: Pinned[]): string {
  const byBuild = new Map<string, number>();
  for (const p of pinned) byBuild.set(p.buildId, (byBuild.get(p.buildId) ?? 0) + 1);
  return [...byBuild.entries()].map(([build, n]) => `${n} on ${build}`).join(', ');
}

function parseSeconds(text: string): number {
  const value = Number(text.replace(/s$/, ''));
  if (!Number.isFinite(value) || value <= 0) throw new Error(`--timeout must be a number of seconds, got ${text}`);
  return value;
}
