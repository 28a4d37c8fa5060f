// An agent's signed reports as the control worker checks them (common/agent-report.ts): a shard
// report acts only in the reconcile run it was signed for (or as the admin socket's answer), under
// the enrolled key, unaltered and unexpired; a weights report steers placement's "near" only when
// it verifies and was signed after the node's latest registration (activities/weights-verdict.ts).
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { create } from '@bufbuild/protobuf';
import type { Client } from '@temporalio/client';
import { describe, expect, it } from 'vitest';
import { RegisterSchema, type Register } from '../../proto/gen/llmgw/v1/register_pb.js';
import { RunningShardSchema, StartShardSchema } from '../../proto/gen/llmgw/v1/shard_pb.js';
import { payloadConverter } from '../../common/payload-converter.js';
import { AGENT_KEY_FILE, loadOrCreateAgentKey, signEnrollment, type AgentIdentity } from '../../common/agent-identity.js';
import { SHARD_REPORT_TTL_MS, shardReportDigest, signReport } from '../../common/agent-report.js';
import { newKeyPairLines, readCatalogKeys } from '../../common/catalog-key.js';
import type { HeldWeights, NodeView } from '../../common/node-types.js';
import { createReportSigner } from '../../agent/report-signer.js';
import { shardReportRefusal, type ReportTrust } from '../../activities/report-check.js';
import { createWeightsTrust } from '../../activities/weights-verdict.js';
import { placementsInFlight } from '../../activities/placement-inflight.js';
import { refreshTop, type IndexedNode } from '../../activities/placement-index.js';
import type { PlaceRequest } from '../../activities/placement.js';

const dir = (): string => mkdtempSync(join(tmpdir(), 'llmgw-reports-'));
const agent = (): AgentIdentity => loadOrCreateAgentKey(dir());
const ring = (identity: AgentIdentity) => ({ file: AGENT_KEY_FILE, signing: identity.key, all: [identity.key] });

function catalogKeyFile(): string {
  const file = join(dir(), 'catalog.key');
  writeFileSync(file, `${newKeyPairLines().privateLine}\n`, { mode: 0o600 });
  return file;
}
const catalogFile = catalogKeyFile();
const catalog = readCatalogKeys(catalogFile);

function report(nodeId: string, shardIds: string[]): Register {
  return create(RegisterSchema, {
    nodeId,
    managementAddress: '10.0.0.5',
    reportedAt: new Date().toISOString(),
    runningShards: shardIds.map((shardId) =>
      create(RunningShardSchema, { spec: create(StartShardSchema, { shardId, replicaId: 'replica/chat/1', gpuIndices: [0] }) }),
    ),
  });
}

function nodeView(nodeId: string, identity: AgentIdentity | undefined, extra: Partial<NodeView> = {}): NodeView {
  return {
    nodeId,
    phase: 'Ready',
    cordoned: false,
    reason: '',
    inventory: undefined,
    allocations: [],
    freeGpus: [0, 1],
    registrations: 1,
    lastRegisteredAt: undefined,
    notReadySince: undefined,
    enrolled: identity !== undefined,
    ...(identity ? { enrollment: signEnrollment(nodeId, identity.publicKey, catalog) } : {}),
    ...extra,
  } as NodeView;
}

const trust = (trustUnenrolled = false): ReportTrust => ({ catalogKeys: () => catalog.all, trustUnenrolled, log: () => undefined });
const signedFor = (r: Register, identity: AgentIdentity, workflowId: string, runId: string, signedAt = Date.now()): Register => ({
  ...r,
  reportSignature: signReport(
    {
      kind: 'shards',
      nodeId: r.nodeId,
      workflowId,
      runId,
      signedAt,
      expiresAt: signedAt + SHARD_REPORT_TTL_MS,
      digest: shardReportDigest(r),
    },
    ring(identity),
  ),
});

describe('shard reports', () => {
  it("acts on the agent's own report after a trip through a payload, and on nothing forged", () => {
    const identity = agent();
    const view = nodeView('gpu-5', identity);
    // Outside an activity the agent signs for nobody in particular: its admin socket's answer.
    const genuine = payloadConverter.fromPayload<Register>(
      payloadConverter.toPayload(createReportSigner(identity, 'gpu-5').shards(report('gpu-5', ['a']))),
    );
    expect(shardReportRefusal('gpu-5', view, genuine, trust())).toBeUndefined();

    expect(shardReportRefusal('gpu-5', view, { ...genuine, reportSignature: '' }, trust())).toMatch(/unsigned/);
    const altered = { ...genuine, runningShards: report('gpu-5', ['a', 'b']).runningShards };
    expect(shardReportRefusal('gpu-5', view, altered, trust())).toMatch(/names digest/);
    const other = agent();
    expect(shardReportRefusal('gpu-5', view, signedFor(report('gpu-5', []), other, '', ''), trust())).toMatch(/does not verify/);
    expect(shardReportRefusal('gpu-6', nodeView('gpu-6', identity), genuine, trust())).toMatch(/names node gpu-5/);
  });

  it('refuses a genuine report replayed into another run, or after it expired', () => {
    const identity = agent();
    const view = nodeView('gpu-5', identity);
    const survey = signedFor(report('gpu-5', []), identity, 'reconcile/gpu-5/registration-3', 'run-1');
    expect(shardReportRefusal('gpu-5', view, survey, trust())).toMatch(
      /signed for reconcile\/gpu-5\/registration-3 run run-1, not this run/,
    );
    const old = signedFor(report('gpu-5', []), identity, '', '', Date.now() - SHARD_REPORT_TTL_MS - 1_000);
    expect(shardReportRefusal('gpu-5', view, old, trust())).toMatch(/expired/);
  });

  it('acts on an unenrolled node only where the worker trusts unenrolled agents', () => {
    const unsigned = report('gpu-7', ['a']);
    expect(shardReportRefusal('gpu-7', nodeView('gpu-7', undefined), unsigned, trust(true))).toBeUndefined();
    expect(shardReportRefusal('gpu-7', nodeView('gpu-7', undefined), unsigned, trust())).toMatch(/no enrolled agent key/);
    expect(shardReportRefusal('gpu-7', undefined, unsigned, trust())).toMatch(/no enrolled agent key/);
  });
});

describe('weights reports and placement', () => {
  const source = 'hf://org/model@0123456789abcdef0123456789abcdef01234567';
  const held: HeldWeights[] = [
    { source, repo: 'org/model', commit: '0123456789abcdef0123456789abcdef01234567', bytes: 1, lastUsedAt: '', inUseBy: [] },
  ];
  const request = { replicaId: 'replica/chat/2', deployment: 'chat', gpusPerNode: 1, modelSource: source } as PlaceRequest;
  // Equal in all but the weights; for replica 2 the rotation alone puts node-a first.
  const candidates: IndexedNode[] = [
    { nodeId: 'node-a', state: 'Ready', free: 2, siblings: 0 },
    { nodeId: 'node-b', state: 'Ready', free: 2, siblings: 0 },
  ];
  async function firstChoice(views: NodeView[], trustUnenrolled = false): Promise<string> {
    const client = {
      workflow: { getHandle: (id: string) => ({ query: async () => views.find((v) => `node/${v.nodeId}` === id) }) },
    } as unknown as Client;
    const inFlight = placementsInFlight(
      client,
      createWeightsTrust(catalogFile, trustUnenrolled, () => undefined),
    );
    return (await refreshTop(inFlight, request, candidates))[0]!.nodeId;
  }

  it("prefers a node for its weights only when its agent's signature over them verifies", async () => {
    const a = agent();
    const b = agent();
    const plainA = nodeView('node-a', a);
    const withWeights = (proof: string | undefined, extra: Partial<NodeView> = {}): NodeView =>
      nodeView('node-b', b, { weights: held, ...(proof ? { weightsProof: proof } : {}), ...extra });
    const signer = createReportSigner(b, 'node-b');
    expect(await firstChoice([plainA, withWeights(signer.weights(held))])).toBe('node-b');

    expect(await firstChoice([plainA, withWeights(undefined)])).toBe('node-a');
    expect(await firstChoice([plainA, withWeights(createReportSigner(agent(), 'node-b').weights(held))])).toBe('node-a');
    expect(await firstChoice([plainA, withWeights(signer.weights([]))])).toBe('node-a');
    // Signed before the registration the node acted on last: an old report replayed.
    const old = signer.weights(held);
    const later = new Date(Date.now() + 1_000).toISOString();
    expect(await firstChoice([plainA, withWeights(old, { registrationSignedAt: later })])).toBe('node-a');
  });

  it('takes an unenrolled node at its word only where the worker trusts unenrolled agents', async () => {
    const views = [nodeView('node-a', agent()), nodeView('node-b', undefined, { weights: held })];
    expect(await firstChoice(views, true)).toBe('node-b');
    expect(await firstChoice(views)).toBe('node-a');
  });
});
