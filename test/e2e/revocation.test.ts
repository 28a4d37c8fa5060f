// Revocation of what already runs, and of fetches (docs/signed-statements.md, "Revocation"): a
// revision the catalog revokes has its running engine stopped within seconds (the catalog
// notifier has every node reconciled), and its replica ends saying it was revoked and what to
// do; a prefetch of the revoked revision onto another host fetches nothing; a key taken out of
// the worker's key file stops the engines of what it signed within seconds, and no other. Its own
// Temporal server, a stand-in hub, a control worker and real agents with real fake engines.
import { appendFileSync, mkdtempSync, readdirSync, renameSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Client } from '@temporalio/client';
import { newKeyPairLines, parseKeyLine } from '../../common/catalog-key.js';
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
/** A model of its own for the key-removal case, so the catalog revocation above leaves it live. */
const KEYED_MODEL = 'wrevokekey';

let server: { stop(): Promise<void> };
let temporal: { client: Client; close: () => Promise<void> };
let hub: StandInHub;
let catalog: string;
const hostA = uniqueId('revoke-a');
const hostB = uniqueId('revoke-b');
/** The revision the first test revokes; the second prefetches it. */
let revoked: string | undefined;
// This file's own catalog keys: A stays, B is taken out of the worker's file by the last test.
// The agents verify with both public keys and are enrolled with A, so only B's removal matters.
const keyA = newKeyPairLines();
const keyB = newKeyPairLines();
const keyDir = mkdtempSync(join(tmpdir(), 'llmgw-revoke-keys-'));
const workerKeyFile = join(keyDir, 'catalog.key');
const keyEnv = {
  LLMGW_CATALOG_KEY_FILE: workerKeyFile,
  LLMGW_CATALOG_PUBLIC_KEY_FILE: join(keyDir, 'catalog.key.pub'),
  LLMGW_AGENT_ENROLL_KEY_FILE: join(keyDir, 'enroll.key'),
};

/** Replaces the worker's key file whole (write, rename), as an operator's tooling would. */
function writeWorkerKeys(...lines: string[]): void {
  writeFileSync(`${workerKeyFile}.new`, `${lines.join('\n')}\n`, { mode: 0o600 });
  renameSync(`${workerKeyFile}.new`, workerKeyFile);
}

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
  const keyed = `  - name: ${KEYED_MODEL}\n    source: hf://${REPO}\n    profiles:\n      - ${profile}\n`;
  catalog = writeCatalogFile('llmgw-revoke-catalog-', oneModelCatalog(MODEL, `hf://${REPO}`, profile) + keyed);
  writeWorkerKeys(keyA.privateLine, keyB.privateLine);
  writeFileSync(keyEnv.LLMGW_CATALOG_PUBLIC_KEY_FILE, `${keyA.publicLine}\n${keyB.publicLine}\n`);
  writeFileSync(keyEnv.LLMGW_AGENT_ENROLL_KEY_FILE, `${keyA.privateLine}\n`, { mode: 0o600 });
  const worker = spawnLlmgw(['worker', '--catalog', catalog], { HF_ENDPOINT: hub.url, ...keyEnv });
  await worker.waitForOutput(/serving task queue llmgw/, 90_000);
  await startSimAgent(hostA, {
    inventory: inventory('weightsx8.yaml'),
    extra: ['--weights-dir', weightsDir(hostA)],
    env: { HF_ENDPOINT: hub.url, ...keyEnv },
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
    await startSimAgent(hostB, {
      inventory: inventory('weightsx8.yaml'),
      extra: ['--weights-dir', cache],
      env: { HF_ENDPOINT: hub.url, ...keyEnv },
    });
    hub.resetCounter();
    const prefetched = await runLlmgw(['weights', 'prefetch', MODEL, '--nodes', hostB], {}, 60_000);
    expect(prefetched.code, prefetched.output).not.toBe(0);
    expect(prefetched.output).toMatch(new RegExp(`revision ${revoked} is revoked in the catalog`));
    expect(hub.bytesServed()).toBe(0);
    expect(readdirSync(cache, { recursive: true })).toEqual([]);
  }, 90_000);

  it('stops the engines of what a key removed from the key file signed within seconds, and no other', async () => {
    const engineOf = (name: string) => enginesOf([hostA]).find((e) => e.env.LLMGW_REPLICA_ID?.startsWith(`replica/${name}/`));
    const deploy = async (name: string) => {
      const deployed = await runLlmgw(['deploy', KEYED_MODEL, '--name', name, '--replicas', '1', '--wait', '--timeout', '60'], {}, 90_000);
      expect(deployed.code, deployed.output).toBe(0);
      const view = await temporal.client.workflow.getHandle(`deployment/${name}`).query(deploymentStatusQuery);
      expect(engineOf(name)?.env.LLMGW_REPLICA_ID).toBe(view.replicas[0]!.replicaId);
      return view;
    };
    const idOf = (line: string) => parseKeyLine(line, 'a test key').id;
    // Key A signs first (the file as written at start), then B, as after a rotation's first step.
    const stays = uniqueId('wkeya');
    expect((await deploy(stays)).revisions?.[0]?.signature).toMatch(new RegExp(`^v2\\.${idOf(keyA.privateLine)}\\.`));
    writeWorkerKeys(keyB.privateLine, keyA.privateLine);
    const goes = uniqueId('wkeyb');
    const gone = await deploy(goes);
    expect(gone.revisions?.[0]?.signature).toMatch(new RegExp(`^v2\\.${idOf(keyB.privateLine)}\\.`));
    const staysPid = engineOf(stays)!.pid;

    writeWorkerKeys(keyA.privateLine);
    const removedAt = Date.now();
    // The key file is looked at every 5 s with the catalog; the node's reconcile stops the engine.
    await eventually('the engine of the removed key stopped', () => (engineOf(goes) ? undefined : true), 30_000, 250);
    const stoppedInMs = Date.now() - removedAt;
    const ended = (await temporal.client.workflow.getHandle(gone.replicas[0]!.replicaId).result()) as ReplicaView;
    expect(ended.phase).toBe('Stopped');
    expect(ended.reason).toMatch(new RegExp(`key ${idOf(keyB.privateLine)}, which is no longer in the control worker's key file`));
    expect(ended.reason).toMatch(new RegExp(`llmgw rollout ${goes}`));
    expect(engineOf(stays)?.pid).toBe(staysPid);
    console.log(`engine of the removed key stopped ${stoppedInMs} ms after the key file was replaced`);
  }, 150_000);
});
