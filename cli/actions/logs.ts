// `llmgw logs REPLICA`: a replica's engine log, read through the admin API of the agent that
// runs the rank asked for (the replica workflow says which node). Operator side.
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { withClient } from './client.js';
import { CliError } from '../errors.js';
import { describeNodeQuery, replicaStatusQuery } from '../../workflows/definitions.js';
import type { ReplicaView } from '../../common/replica-types.js';
import { connectAdmin } from '../../agent/admin/client.js';
import { ADMIN_TOKEN_FILE, isUnixAddress, readTokenFile } from '../../agent/admin/auth.js';

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
