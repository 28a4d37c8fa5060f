// `llmgw scale | undeploy | logs`: change a deployment's count or autoscaling bounds, drain it
// away, and read an engine's log through its agent. Operator side.
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { WorkflowNotFoundError } from '@temporalio/client';
import { CliError, withClient } from './client.js';
import { deploymentWorkflowId } from '../../common/names.js';
import { AutoscaleSchema } from '../../common/autoscale.js';
import { describeIssues } from '../../workflows/toolkit.js';
import {
  deploymentStatusQuery,
  describeNodeQuery,
  replicaStatusQuery,
  scaleUpdate,
  setAutoscaleUpdate,
  undeployUpdate,
} from '../../workflows/definitions.js';
import type { DeploymentView, ReplicaView } from '../../common/replica-types.js';
import { connectAdmin } from '../../agent/admin/client.js';
import { ADMIN_TOKEN_FILE, isUnixAddress, readTokenFile } from '../../agent/admin/auth.js';
import { failureMessage, print } from './deployment-view.js';

export interface ScaleOptions {
  min?: string;
  max?: string;
  idleToZero?: string;
  /** false with --no-autoscale */
  autoscale?: boolean;
  json?: boolean;
}

export async function scaleCommand(name: string, replicas: string | undefined, opts: ScaleOptions): Promise<void> {
  const bounds = opts.min !== undefined || opts.max !== undefined;
  if (replicas === undefined && !bounds && opts.autoscale !== false)
    throw new CliError('give a replica count, or --min/--max for an autoscaled deployment');
  if (replicas !== undefined && bounds) throw new CliError('give either a replica count or --min/--max, not both');
  const count = Number(replicas);
  if (replicas !== undefined && (!Number.isInteger(count) || count < 0))
    throw new CliError(`replicas must be a whole number ≥ 0, got ${replicas}`);
  await withClient(async (client) => {
    const handle = client.workflow.getHandle(deploymentWorkflowId(name));
    try {
      let view: DeploymentView;
      if (opts.autoscale === false) {
        view = await handle.executeUpdate(setAutoscaleUpdate, { args: [null] });
        if (replicas !== undefined) view = await handle.executeUpdate(scaleUpdate, { args: [count] });
      } else if (bounds) {
        const current = (await handle.query(deploymentStatusQuery)).autoscale;
        const settings = {
          min: opts.min !== undefined ? Number(opts.min) : (current?.min ?? 1),
          max: opts.max !== undefined ? Number(opts.max) : (current?.max ?? Number(opts.min)),
          ...(opts.idleToZero !== undefined
            ? { idleToZeroSeconds: Number(opts.idleToZero) }
            : current?.idleToZeroSeconds
              ? { idleToZeroSeconds: current.idleToZeroSeconds }
              : {}),
        };
        const parsed = AutoscaleSchema.safeParse(settings);
        if (!parsed.success) throw new CliError(`invalid autoscale bounds: ${describeIssues(parsed.error)}`);
        view = await handle.executeUpdate(setAutoscaleUpdate, { args: [parsed.data] });
      } else {
        view = await handle.executeUpdate(scaleUpdate, { args: [count] });
      }
      print(view, opts.json);
    } catch (error) {
      if (error instanceof WorkflowNotFoundError) throw new CliError(`no deployment named ${name}`);
      throw new CliError(failureMessage(error));
    }
  });
}

export async function undeployCommand(name: string, opts: { wait: boolean; json?: boolean }): Promise<void> {
  await withClient(async (client) => {
    const handle = client.workflow.getHandle(deploymentWorkflowId(name));
    try {
      await handle.executeUpdate(undeployUpdate);
    } catch (error) {
      if (error instanceof WorkflowNotFoundError) throw new CliError(`no deployment named ${name}`);
      throw new CliError(failureMessage(error));
    }
    console.error(`undeploying ${name}: draining every replica`);
    if (!opts.wait) return;
    const final = (await handle.result()) as DeploymentView;
    print(final, opts.json);
  });
}

/** The token for an agent's TCP admin API: the flag, the variable, or `llmgw up`'s state dir. */
function adminTokenFor(nodeId: string, address: string, flag: string | undefined): string | undefined {
  if (isUnixAddress(address)) return undefined;
  const file = flag ?? process.env.LLMGW_ADMIN_TOKEN_FILE ?? join('.llmgw', 'agents', nodeId, ADMIN_TOKEN_FILE);
  if (!existsSync(file)) {
    throw new CliError(
      `agent ${nodeId}'s admin API is on TCP (${address}) and needs its token: --admin-token-file <its state dir>/${ADMIN_TOKEN_FILE} (readable by the agent's user only)`,
    );
  }
  try {
    return readTokenFile(file);
  } catch (error) {
    throw new CliError(`cannot read ${file}: ${(error as NodeJS.ErrnoException).code ?? String(error)} (run as the agent's user)`);
  }
}

export async function logsCommand(
  replica: string,
  opts: { lines: string; follow?: boolean; rank: string; adminTokenFile?: string },
): Promise<void> {
  const replicaId = replica.startsWith('replica/') ? replica : `replica/${replica}`;
  await withClient(async (client) => {
    const view = (await client.workflow
      .getHandle(replicaId)
      .query(replicaStatusQuery)
      .catch(() => {
        throw new CliError(`no running replica ${replicaId} (\`llmgw status NAME\` lists them)`);
      })) as ReplicaView;
    const shard = view.shards.find((s) => s.rank === Number(opts.rank));
    if (!shard) throw new CliError(`${replicaId} has no rank ${opts.rank} placed (${view.phase}: ${view.reason})`);
    const node = await client.workflow.getHandle(`node/${shard.nodeId}`).query(describeNodeQuery);
    const address = node.inventory?.adminAddress;
    if (!address) throw new CliError(`node ${shard.nodeId} has not reported its admin address`);
    const token = adminTokenFor(shard.nodeId, address, opts.adminTokenFile);
    const admin = connectAdmin(address, token === undefined ? {} : { token });
    await new Promise<void>((resolve, reject) => {
      const stream = admin.tail(shard.shardId, Number(opts.lines), Boolean(opts.follow));
      stream.on('data', (chunk: { lines: string[] }) => {
        for (const line of chunk.lines) console.log(line);
      });
      stream.on('end', () => resolve());
      stream.on('error', (error: Error) => reject(new CliError(`agent ${shard.nodeId} (${address}): ${error.message}`)));
      process.once('SIGINT', () => {
        stream.cancel();
        resolve();
      });
    }).finally(() => admin.close());
  });
}
