// Signed shard reports, end to end (issue 37): a namespace member starts reconcileNode with a
// report of their own that says the node's engine runs a profile gone from the catalog (which
// reconciliation answers by stopping it and freeing its GPUs): unsigned, signed by another key,
// and a genuine survey copied out of an earlier reconcile run's history. None is acted on: the
// same engine pid serves, on the same GPUs, and the node holds them.
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { CONTROL_TASK_QUEUE } from '../../common/names.js';
import { payloadConverter } from '../../common/payload-converter.js';
import { AGENT_KEY_FILE } from '../../common/agent-identity.js';
import { SHARD_REPORT_TTL_MS, shardReportDigest, signReport } from '../../common/agent-report.js';
import { newKeyPairLines, parseKeyLine } from '../../common/catalog-key.js';
import type { NodeView } from '../../common/node-types.js';
import type { ReconcileResult } from '../../common/reconcile-types.js';
import type { Register } from '../../proto/gen/llmgw/v1/register_pb.js';
import { describeNodeQuery } from '../../workflows/definitions.js';
import { enginesOf, eventually, INVENTORIES, runLlmgw, uniqueId, useIsolatedFleet } from '../helpers/fleet.js';

const REPORTS = join(INVENTORIES, 'reportsx8.yaml');
const fleet = useIsolatedFleet({ gpuClass: 'REPORTS' });

const node = (nodeId: string): Promise<NodeView> => fleet.client.workflow.getHandle(`node/${nodeId}`).query(describeNodeQuery);

async function reconcile(nodeId: string, report?: Register): Promise<{ id: string; result: ReconcileResult }> {
  const id = uniqueId(`reconcile/${nodeId}/by-hand`);
  const result = await fleet.client.workflow.execute<(input: unknown) => Promise<ReconcileResult>>('reconcileNode', {
    workflowId: id,
    taskQueue: CONTROL_TASK_QUEUE,
    args: [{ nodeId, trigger: 'test', ...(report ? { report } : {}) }],
  });
  return { id, result };
}

/** The survey a reconcile run took, as anyone who can read its history sees it. */
async function surveyOf(id: string): Promise<Register> {
  const events = (await fleet.client.workflow.getHandle(id).fetchHistory()).events ?? [];
  const scheduled = events.find((e) => e.activityTaskScheduledEventAttributes?.activityType?.name === 'survey');
  const completed = events.find((e) => String(e.activityTaskCompletedEventAttributes?.scheduledEventId) === String(scheduled?.eventId));
  return payloadConverter.fromPayload<Register>(completed!.activityTaskCompletedEventAttributes!.result!.payloads![0]!);
}

describe('signed shard reports', () => {
  it('a forged, foreign-signed or replayed report stops no engine and moves no GPU', async () => {
    const nodeId = uniqueId('reports');
    await fleet.agent(nodeId, { inventory: REPORTS });
    await eventually('the node Ready and enrolled', async () => {
      const view = await node(nodeId).catch(() => undefined);
      return view?.phase === 'Ready' && view.enrolled ? true : undefined;
    });
    const name = uniqueId('reports-dep');
    const deployed = await runLlmgw(['deploy', 'reports', '--name', name, '--replicas', '1', '--wait', '--timeout', '60']);
    expect(deployed.code, deployed.output).toBe(0);
    const engine = () => enginesOf([nodeId]).map((e) => `${e.env.LLMGW_SHARD_ID}:${e.pid}`);
    const held = async () => (await node(nodeId)).allocations.map((a) => `${a.shardId}:${a.gpuIndices.join(',')}`);
    const before = { engines: engine(), held: await held() };
    expect(before.engines).toHaveLength(1);
    expect(before.held).toHaveLength(1);

    // The agent's own survey is acted on (and finds nothing to do); it is signed for that run.
    const genuine = await reconcile(nodeId);
    expect(genuine.result.skipped).toBeUndefined();
    expect(genuine.result.changed).toBe(0);
    const survey = await surveyOf(genuine.id);
    expect(survey.reportSignature).not.toBe('');

    // What reconciliation would stop the engine for: its profile is gone from the catalog.
    const gone: Register = {
      ...survey,
      reportSignature: '',
      runningShards: survey.runningShards.map((s) => ({ ...s, spec: { ...s.spec!, profile: { ...s.spec!.profile!, name: 'gone' } } })),
    };
    const otherKey = parseKeyLine(newKeyPairLines().privateLine, 'another key');
    const signedAt = Date.now();
    const foreign: Register = {
      ...gone,
      reportSignature: signReport(
        {
          kind: 'shards',
          nodeId,
          workflowId: '',
          runId: '',
          signedAt,
          expiresAt: signedAt + SHARD_REPORT_TTL_MS,
          digest: shardReportDigest(gone),
        },
        { file: AGENT_KEY_FILE, signing: otherKey, all: [otherKey] },
      ),
    };
    for (const [what, report, why] of [
      ['unsigned', gone, /unsigned/],
      ['signed by another key', foreign, /does not verify/],
      ['replayed from another run', survey, /not this run/],
    ] as const) {
      const { result } = await reconcile(nodeId, report);
      // The outcome first (the code before this check stops the engine here), then why.
      expect(engine(), what).toEqual(before.engines);
      expect(await held(), what).toEqual(before.held);
      expect(result.actions, what).toEqual([]);
      expect(result.skipped, what).toMatch(why);
    }
  });
});
