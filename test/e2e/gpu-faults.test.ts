// GPU faults while serving: two simulated hosts whose agents watch GPU health through the
// stand-in nvidia-smi (--gpu-watch) and a kernel log file (--xid-log). An Xid 79 injected on
// the GPU that serves a replica moves the replica (Ready elsewhere within 30 s), the GPU shows
// as held out in `llmgw nodes` and nothing new is placed on it, until `llmgw nodes clear-gpu`.
import { mkdtempSync } from 'node:fs';
import { execFileSync } from 'node:child_process';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { deploymentStatusQuery, describeNodeQuery } from '../../workflows/definitions.js';
import type { DeploymentView } from '../../common/replica-types.js';
import type { NodeView } from '../../common/node-types.js';
import {
  eventually,
  INVENTORIES,
  killEnginesOf,
  runLlmgw,
  spawnControlWorker,
  startSimAgent,
  stopAll,
  type LlmgwProcess,
} from '../helpers/processes.js';
import { testClient, uniqueId, useOwnTemporal } from '../helpers/temporal.js';

const SMI = join(__dirname, '../helpers/bin/nvidia-smi');
const hosts = [uniqueId('gpufault-a'), uniqueId('gpufault-b')].map((nodeId) => ({
  nodeId,
  faults: mkdtempSync(join(tmpdir(), 'llmgw-smi-')),
  proc: undefined as LlmgwProcess | undefined,
}));
const nodeIds = hosts.map((h) => h.nodeId);
const name = uniqueId('gpufault');
let temporal: { stop(): Promise<void> };
let client: Awaited<ReturnType<typeof testClient>>;

const smiEnv = (faults: string) => ({ LLMGW_FAKE_SMI_HOST: 'h100x8', LLMGW_FAKE_SMI_FAULTS: faults });
const inject = (nodeId: string, ...args: string[]): void => {
  const host = hosts.find((h) => h.nodeId === nodeId)!;
  execFileSync(SMI, ['--llmgw-inject', ...args], { env: { ...process.env, ...smiEnv(host.faults) } });
};
const status = (): Promise<DeploymentView> => client.client.workflow.getHandle(`deployment/${name}`).query(deploymentStatusQuery);
const nodeOf = (nodeId: string): Promise<NodeView> => client.client.workflow.getHandle(`node/${nodeId}`).query(describeNodeQuery);

beforeAll(async () => {
  temporal = await useOwnTemporal('gpufault');
  client = await testClient();
  await spawnControlWorker();
  for (const host of hosts) {
    host.proc = (
      await startSimAgent(host.nodeId, {
        inventory: join(INVENTORIES, 'netx2.yaml'),
        extra: ['--gpu-watch', SMI, '--xid-log', join(host.faults, 'kmsg'), '--gpu-watch-seconds', '1'],
        env: smiEnv(host.faults),
      })
    ).proc;
  }
});

afterAll(async () => {
  await stopAll();
  await killEnginesOf(nodeIds);
  await client?.close();
  await temporal?.stop();
});

describe('GPU faults while serving', () => {
  it('moves the replica off a GPU that reports Xid 79, holds the GPU out until it is cleared', async () => {
    const deployed = await runLlmgw([
      'deploy',
      'net',
      '--name',
      name,
      '--replicas',
      '1',
      '--profile',
      'one-gpu',
      '--wait',
      '--timeout',
      '60',
    ]);
    expect(deployed.code, deployed.output).toBe(0);
    const before = (await status()).replicas.find((r) => r.phase === 'Ready')!;
    const [nodeId, gpu] = [before.shards[0]!.nodeId, before.shards[0]!.gpuIndices[0]!];

    const injectedAt = Date.now();
    inject(nodeId, 'xid', String(gpu), '79');
    const after = await eventually(
      'the replica Ready off the faulty GPU',
      async () => {
        const r = (await status()).replicas.find((x) => x.replicaId === before.replicaId);
        const shard = r?.shards[0];
        return r?.phase === 'Ready' && shard && !(shard.nodeId === nodeId && shard.gpuIndices.includes(gpu)) ? r : undefined;
      },
      45_000,
      250,
    ).catch((error: unknown) => {
      throw new Error(
        `${String(error)}; the agent said:\n${hosts
          .find((h) => h.nodeId === nodeId)!
          .proc!.output()
          .slice(-3000)}`,
      );
    });
    const movedMs = Date.now() - injectedAt;
    console.log(`gpu-faults: Ready elsewhere ${movedMs} ms after Xid 79 on ${nodeId} GPU ${gpu} (now ${after.shards[0]!.nodeId})`);
    expect(movedMs).toBeLessThan(30_000);

    const shown = await runLlmgw(['nodes']);
    const row = shown.output.slice(shown.output.indexOf(nodeId));
    expect(row).toMatch(new RegExp(`GPU ${gpu}: held out .*Xid 79`, 's'));
    expect((await nodeOf(nodeId)).freeGpus).not.toContain(gpu);

    // Every other GPU fills up; the faulty one stays empty.
    const scaled = await runLlmgw(['scale', name, '3']);
    expect(scaled.code, scaled.output).toBe(0);
    const three = await eventually(
      'three replicas Ready',
      async () => {
        const view = await status();
        const ready = view.replicas.filter((r) => r.phase === 'Ready');
        return ready.length === 3 ? ready : undefined;
      },
      60_000,
    );
    for (const r of three) expect(r.shards[0]!.nodeId === nodeId && r.shards[0]!.gpuIndices.includes(gpu)).toBe(false);

    const cleared = await runLlmgw(['nodes', 'clear-gpu', nodeId, String(gpu)]);
    expect(cleared.code, cleared.output).toBe(0);
    expect(cleared.output).toContain(`GPU ${gpu} on ${nodeId} is back in placement`);
    await eventually('the GPU free again', async () => ((await nodeOf(nodeId)).freeGpus.includes(gpu) ? true : undefined), 30_000);
    const again = await runLlmgw(['nodes']);
    expect(again.output).not.toMatch(/held out/);
  });
});
