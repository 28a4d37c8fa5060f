// `llmgw up` on a dev server that kept runs of an earlier build of this checkout: after a code
// change no worker serves those runs any more (they are Pinned), so the agents' registrations
// and the demo deployment would wait on them for ever. Once this start's worker is Current,
// every llmgw run on another build is ended with the reason that makes reconciliation treat it
// as lost (docs/upgrades.md); `llmgw up` has already stopped their engines, so nothing is
// adopted, and the agents, the control worker and `llmgw up` start what is needed anew.
import { openSync, readSync, closeSync, statSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Client } from '@temporalio/client';
import { ENDED_TO_BE_ADOPTED } from '../../common/reconcile-types.js';
import { describeDeployment, DEFAULT_DEPLOYMENT_NAME } from '../../workers/versioning.js';

const LLMGW_TYPES = ['deployModel', 'replica', 'node', 'routes'];

/** The log's size now: what this start's worker writes comes after it (the log is appended to). */
export function logSize(file: string): number {
  try {
    return statSync(file).size;
  } catch {
    return 0;
  }
}

function readFrom(file: string, offset: number): string {
  const fd = openSync(file, 'r');
  try {
    const buffer = Buffer.alloc(Math.max(0, logSize(file) - offset));
    readSync(fd, buffer, 0, buffer.length, offset);
    return buffer.toString('utf8');
  } finally {
    closeSync(fd);
  }
}

export async function endRunsOfEarlierBuilds(
  client: Client,
  worker: { log: string; from: number },
  failure: () => string | undefined,
  say: (line: string) => void,
  timeoutMs = 120_000,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  let buildId: string | undefined;
  while (!buildId) {
    const failed = failure();
    if (failed !== undefined) throw new Error(failed);
    if (Date.now() > deadline) throw new Error(`timed out waiting for the worker to start; see ${worker.log}`);
    buildId = /serving task queue llmgw as [^:\s]+:(\S+)/.exec(readFrom(worker.log, worker.from))?.[1];
    if (!buildId) await sleep(300);
  }
  while ((await describeDeployment(client, DEFAULT_DEPLOYMENT_NAME).catch(() => undefined))?.current !== buildId) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${buildId} to become Current; see ${worker.log}`);
    await sleep(300);
  }
  const types = LLMGW_TYPES.map((t) => `'${t}'`).join(', ');
  const query = `ExecutionStatus = 'Running' AND WorkflowType IN (${types}) AND TemporalWorkerDeploymentVersion != '${DEFAULT_DEPLOYMENT_NAME}:${buildId}'`;
  let ended = 0;
  for await (const run of client.workflow.list({ query })) {
    await client.workflow
      .getHandle(run.workflowId)
      .terminate(`${ENDED_TO_BE_ADOPTED} (a run of an earlier build, which no worker of this llmgw up serves)`)
      .catch(() => undefined);
    ended++;
  }
  if (ended) say(`ended ${ended} run(s) of earlier builds of llmgw on this dev server; they start anew on ${buildId}`);
}
