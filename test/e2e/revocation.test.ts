// Revocation of what already runs, and of fetches (docs/signed-statements.md, "Revocation"): a
// revision the catalog revokes has its running engine stopped within seconds (the catalog
// notifier has every node reconciled), and its replica ends saying it was revoked and what to
// do; a prefetch of the revoked revision onto another host fetches nothing. Its own Temporal
// server, a stand-in hub, a control worker and real agents with real fake engines.
import { appendFileSync, mkdtempSync, readdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Client } from '@temporalio/client';
import type { ReplicaView } from '../../common/replica-types.js';
import { deploymentStatusQuery } from '../../workflows/definitions.js';
import {
  endFleet,
  enginesOf,
  eventually,
  inventory,
  runLlmgw,
  sleep,
  spawnLlmgw,
  startSimAgent,
  testClient,
  uniqueId,
  useOwnTemporal,
} from '../helpers/fleet.js';
import { startStandInHub, type StandInHub } from '../helpers/stand-in-hub.js';
import { oneModelCatalog, writeCatalogFile } from '../helpers/catalog-file.js';

const REPO = 'llmgw-test/w-revoke';
const MODEL = 'wrevoke';

let server: { stop(): Promise<void> };
let temporal: { client: Client; close: () => Promise<void> };
let hub: StandInHub;
let catalog: string;
const hostA = uniqueId('revoke-a');
const hostB = uniqueId('revoke-b');
/** The revision the first test revokes; the second prefetches it. */
let revoked: string | undefined;

function weightsDir(nodeId: string): string {
  return mkdtempSync(join(tmpdir(), `llmgw-${nodeId}-weights-`));
}

beforeAll(async () => {
  server = await useOwnTemporal('revocation');
  temporal = await testClient();
  hub = await startStandInHub();
  hub.addRepo({
    repo: REPO,
    files: [
      { path: 'config.json', size: 300 },
      { path: 'model.safetensors', size: 200_000 },
    ],
  });
  const profile = '{ name: p, engine: fake, gpuClass: WEIGHTS, gpusPerNode: 1, startupTimeoutSeconds: 60 }';
  catalog = writeCatalogFile('llmgw-revoke-catalog-', oneModelCatalog(MODEL, `hf://${REPO}`, profile));
  const worker = spawnLlmgw(['worker', '--catalog', catalog], { HF_ENDPOINT: hub.url });
  await worker.waitForOutput(/serving task queue llmgw/, 90_000);
  await startSimAgent(hostA, {
    inventory: inventory('weightsx8.yaml'),
    extra: ['--weights-dir', weightsDir(hostA)],
    env: { HF_ENDPOINT: hub.url },
  });
}, 180_000);

afterAll(async () => {
  await endFleet({ nodeIds: [hostA, hostB], server, closeClient: temporal?.close });
  await hub?.close();
});

describe('revocation of what runs and of fetches', () => {
  it('stops the engine of a revision the catalog revokes, and its replica ends saying why', async () => {
    const name = uniqueId('wrev');
    const deployed = await runLlmgw(['deploy', MODEL, '--name', name, '--replicas', '1', '--wait', '--timeout', '60'], {}, 90_000);
    expect(deployed.code, deployed.output).toBe(0);
    const view = await temporal.client.workflow.getHandle(`deployment/${name}`).query(deploymentStatusQuery);
    const replicaId = view.replicas[0]!.replicaId;
    const ofDeployment = () => enginesOf([hostA]).filter((e) => e.env.LLMGW_REPLICA_ID?.startsWith(`replica/${name}/`));
    expect(ofDeployment().map((e) => e.env.LLMGW_REPLICA_ID)).toEqual([replicaId]);

    revoked = view.revision;
    appendFileSync(catalog, `revoked:\n  - ${revoked}\n`);
    const revokedAt = Date.now();
    // The catalog is looked at every 5 s; the node's reconcile stops the engine (10 s grace).
    await eventually('the revoked engine stopped', () => (ofDeployment().length === 0 ? true : undefined), 40_000, 250);
    const stoppedInMs = Date.now() - revokedAt;
    const ended = (await temporal.client.workflow.getHandle(replicaId).result()) as ReplicaView;
    expect(ended.phase).toBe('Stopped');
    expect(ended.reason).toMatch(new RegExp(`revision ${revoked} is revoked in the catalog`));
    expect(ended.reason).toMatch(new RegExp(`llmgw rollout ${name}`));
    // Not started again: its deployment's replacements are refused placement.
    await sleep(5_000);
    expect(ofDeployment()).toEqual([]);
    console.log(`revoked engine stopped ${stoppedInMs} ms after the catalog edit`);
  }, 150_000);

  it('fetches nothing for a prefetch of the revoked revision', async () => {
    expect(revoked).toBeDefined();
    const cache = weightsDir(hostB);
    await startSimAgent(hostB, { inventory: inventory('weightsx8.yaml'), extra: ['--weights-dir', cache], env: { HF_ENDPOINT: hub.url } });
    hub.resetCounter();
    const prefetched = await runLlmgw(['weights', 'prefetch', MODEL, '--nodes', hostB], {}, 60_000);
    expect(prefetched.code, prefetched.output).not.toBe(0);
    expect(prefetched.output).toMatch(new RegExp(`revision ${revoked} is revoked in the catalog`));
    expect(hub.bytesServed()).toBe(0);
    expect(readdirSync(cache, { recursive: true })).toEqual([]);
  }, 90_000);
});
