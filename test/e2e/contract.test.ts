// The contract between control plane and agents, on a real dev server: a StartShard
// handed to an activity and a RunningShard handed back travel as json/protobuf with
// their message type, readable in the Web UI, and survive the round trip intact.
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { create, equals } from '@bufbuild/protobuf';
import { decode } from '@temporalio/common/lib/encoding';
import { EngineProfileSchema, Engine, RunningShardSchema, StartShardSchema, type RunningShard } from '../../proto/gen/llmgw/v1/shard_pb.js';
import { testClient, uniqueId, withWorker } from '../helpers/temporal.js';
import { recordHistory } from '../helpers/histories.js';
import { shardRoundTrip } from '../workflows/roundtrip.js';
import * as activities from '../helpers/roundtrip-activities.js';

describe('protobuf payloads on a real Temporal server', () => {
  it('carries a StartShard to an activity and a RunningShard back as json/protobuf with messageType', async () => {
    const { client, close } = await testClient();
    const taskQueue = uniqueId('contract');
    const spec = create(StartShardSchema, {
      replicaId: 'replica/demo/1',
      shardId: 'replica/demo/1/rank-0',
      deployment: 'demo',
      rank: 0,
      nnodes: 1,
      gpuIndices: [2, 3],
      hcas: ['mlx5_2', 'mlx5_3'],
      httpPort: 18003,
      nodeId: 'sim-a',
      startupTimeoutSeconds: 60,
      profile: create(EngineProfileSchema, {
        name: 'fake-tp2',
        engine: Engine.FAKE,
        servedName: 'demo',
        tensorParallel: 2,
        pipelineParallel: 1,
        gpusPerNode: 2,
        nodes: 1,
        args: ['--load-time', '0'],
        env: { FAKE_FLAG: 'on' },
      }),
    });
    const workflowId = uniqueId('contract-roundtrip');
    try {
      const result: RunningShard = await withWorker(
        { taskQueue, workflowsPath: join(__dirname, '../workflows/index.ts'), activities },
        () => client.workflow.execute(shardRoundTrip, { taskQueue, workflowId, args: [spec] }),
      );

      expect(result.$typeName).toBe('llmgw.v1.RunningShard');
      expect(equals(StartShardSchema, result.spec!, spec)).toBe(true);
      expect(result.spec?.profile?.env).toEqual({ FAKE_FLAG: 'on' });
      expect(result.status?.gpuIndices).toEqual([2, 3]);
      expect(equals(RunningShardSchema, result, await activities.echoShardAsRunning(spec))).toBe(true);

      const history = await client.workflow.getHandle(workflowId).fetchHistory();
      const scheduled = history.events?.find((event) => event.activityTaskScheduledEventAttributes)?.activityTaskScheduledEventAttributes;
      const input = scheduled?.input?.payloads?.[0];
      expect(decode(input!.metadata!.encoding!)).toBe('json/protobuf');
      expect(decode(input!.metadata!.messageType!)).toBe('llmgw.v1.StartShard');
      // What the Web UI shows is the proto3 JSON form: readable field names and enum names.
      const shown = JSON.parse(decode(input!.data!)) as Record<string, unknown>;
      expect(shown.shardId).toBe('replica/demo/1/rank-0');
      expect((shown.profile as Record<string, unknown>).engine).toBe('ENGINE_FAKE');

      const completed = history.events?.find((event) => event.activityTaskCompletedEventAttributes)?.activityTaskCompletedEventAttributes;
      const output = completed?.result?.payloads?.[0];
      expect(decode(output!.metadata!.messageType!)).toBe('llmgw.v1.RunningShard');

      recordHistory(workflowId, 'shardRoundTrip');
    } finally {
      await close();
    }
  });

  it('still accepts plain JSON input, as the Temporal CLI and the Web UI send it', async () => {
    const { client, close } = await testClient();
    const taskQueue = uniqueId('contract-json');
    try {
      // A plain object (no $typeName) is encoded as json/plain; the workflow reads it as data.
      const plain = { replicaId: 'replica/demo/2', shardId: 'replica/demo/2/rank-0', rank: 0, gpuIndices: [0] };
      const result = await withWorker({ taskQueue, workflowsPath: join(__dirname, '../workflows/index.ts'), activities }, () =>
        client.workflow.execute('shardRoundTrip', { taskQueue, workflowId: uniqueId('contract-json'), args: [plain] }),
      );
      expect((result as RunningShard).status?.shardId).toBe('replica/demo/2/rank-0');
    } finally {
      await close();
    }
  });
});
