// What the route signer checks beyond a route's ticket (issue 37), on the reconciliation stack
// (its own dev server, a worker, two agents, a router). The engine's port: startShard and
// waitHealthy completed by someone other than the agent (by activity id, while the agent is
// stopped) name a listening "attacker" port on the agent's own host; no route is signed without
// the agent's own endpoint attestation, while the genuine one is. Revocation: a hand-started
// replica carrying an earlier signed revision of its served name is placed nowhere, and a
// revision the catalog revokes is withdrawn from every router and not restarted after a crash.
// And an agent with --engine-tls: the route signer signs its engine's certificate pin, from the
// attestation, into the route, and the router serves over TLS to that certificate.
import { readFileSync, writeFileSync } from 'node:fs';
import { once } from 'node:events';
import { join } from 'node:path';
import { connect } from 'node:tls';
import { create } from '@bufbuild/protobuf';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { signalGroup } from '../../agent/supervisor/processes/proc.js';
import { readCatalogKeys } from '../../common/catalog-key.js';
import { attestedTlsFingerprint } from '../../common/endpoint-attestation.js';
import { peerPin } from '../../common/engine-tls.js';
import type { ReplicaInput } from '../../common/replica-types.js';
import { signSnapshot } from '../../common/revision-signature.js';
import { RunningShardSchema, ShardState, ShardStatusSchema } from '../../proto/gen/llmgw/v1/shard_pb.js';
import { replicaStatusQuery } from '../../workflows/definitions.js';
import { ROUTES_WORKFLOW_ID, routesQuery } from '../../workflows/routes/definitions.js';
import { testCatalogKeyFile } from '../helpers/catalog-key.js';
import { enginesOf, eventually, runLlmgw, sleep } from '../helpers/processes.js';
import {
  catalogFile,
  causes,
  deploy,
  env,
  inputOf,
  inventoryDir,
  nodeIds,
  nodeView,
  raceNodes,
  routed,
  startAgent,
  startReconcileStack,
  status,
  stopReconcileStack,
  undeploy,
  withClient,
  workerProc,
} from '../helpers/reconcile-stack.js';
import { uniqueId } from '../helpers/temporal.js';
import { useAttacker } from '../helpers/attacker.js';

const attacker = useAttacker();

beforeAll(startReconcileStack);
afterAll(stopReconcileStack);

describe('routes only to attested endpoints of live revisions', () => {
  it('signs no route to a port its agent did not attest, while the genuine endpoint is routed', async () => {
    // The genuine replica: its rank 0 carries its agent's attestation, and it is routed.
    const genuineName = uniqueId('sig-att');
    const genuineView = await deploy('life', genuineName, 1, 'one-gpu');
    expect(await routed(genuineName)).toBe(true);
    const genuineLeader = (
      await withClient((client) => client.workflow.getHandle(genuineView.replicas[0]!.replicaId).query(replicaStatusQuery))
    ).shards.find((s) => s.rank === 0)!;
    expect(genuineLeader.attestation).toBeTruthy();

    // A host of its own (HOLD: only it has the class), its agent stopped but still holding its
    // task polls, so that what the replica sends it waits there for someone to complete it.
    const holdNode = uniqueId('sig-hold');
    raceNodes.push(holdNode);
    const holdAgent = await startAgent(holdNode, join(inventoryDir, 'holdx8.yaml'));
    await eventually('the HOLD node enrolled', async () => (await nodeView(holdNode)).enrolled, 30_000);
    const name = uniqueId('sig-port');
    const attackerPort = Number(new URL(attacker.url).port);
    const hitsBefore = attacker.hits;
    process.kill(holdAgent.pid, 'SIGSTOP');
    try {
      const started = await runLlmgw(['deploy', 'hold', '--name', name, '--replicas', '1', '--profile', 'one-gpu'], env);
      expect(started.code, started.output).toBe(0);
      const replicaId = await eventually('the replica', async () => (await status(name)).replicas[0]?.replicaId, 30_000);
      /** Completes the replica's pending `type` activity by its id: no task token, no agent. */
      const completeAs = (type: string, result: unknown): Promise<true> =>
        eventually(
          `${type} completed by id`,
          () =>
            withClient(async (client) => {
              const pending = (await client.workflow.getHandle(replicaId).describe()).raw.pendingActivities ?? [];
              const activity = pending.find((a) => a.activityType?.name === type);
              if (!activity?.activityId) return undefined;
              await client.activity.complete({ workflowId: replicaId, activityId: activity.activityId }, result);
              return true as const;
            }),
          30_000,
        );
      const shardId = await eventually(
        'the placed shard',
        async () => (await withClient((c) => c.workflow.getHandle(replicaId).query(replicaStatusQuery))).shards[0]?.shardId,
      );
      const forged = (state: ShardState, endpointAttestation = '') =>
        create(ShardStatusSchema, {
          shardId,
          replicaId,
          nodeId: holdNode,
          state,
          pid: 4242,
          httpPort: attackerPort,
          endpoint: `127.0.0.1:${attackerPort}`,
          endpointAttestation,
        });
      // The attacker's port on the agent's own address; the health answer carries the genuine
      // replica's attestation (another node, replica and port), which is all there is to copy.
      await completeAs('startShard', create(RunningShardSchema, { status: forged(ShardState.STARTING) }));
      await completeAs('waitHealthy', forged(ShardState.READY, genuineLeader.attestation));
      await eventually('the replica Ready at the attacker port', async () => {
        const view = await withClient((c) => c.workflow.getHandle(replicaId).query(replicaStatusQuery));
        return view.phase === 'Ready' && view.endpoint === attacker.url;
      });
    } finally {
      process.kill(holdAgent.pid, 'SIGCONT');
    }
    const refusal = new RegExp(`not signing a route to ${attacker.url.replace(/[.:/]/g, '\\$&')} .*is not attested by its agent`);
    await eventually('the route refused', () => refusal.test(workerProc.output()), 20_000);
    for (let i = 0; i < 10; i++) await routed(name).catch(() => false);
    const table = await withClient((client) => client.workflow.getHandle(ROUTES_WORKFLOW_ID).query(routesQuery));
    expect(table.routes.filter((r) => r.endpoint === attacker.url && r.signature)).toEqual([]);
    expect(attacker.hits).toBe(hitsBefore);
    expect(await routed(genuineName)).toBe(true);
    await undeploy(name);
    await undeploy(genuineName);
    await holdAgent.stop();
  }, 120_000);

  it('places nothing for a hand-started replica carrying an earlier signed revision of the same served name', async () => {
    const name = uniqueId('sig-old');
    const view = await deploy('life', name, 1, 'one-gpu');
    const genuineInput = await withClient((client) => inputOf(client, view.replicas[0]!.replicaId));
    // What the control worker signed when the catalog said otherwise: same served name, same
    // deployment, a revision nobody runs any more (copied out of an old history).
    const earlier = signSnapshot({ ...genuineInput.profile, startupTimeoutSeconds: 31 }, readCatalogKeys(testCatalogKeyFile()));
    const replicaId = `replica/${name}/92`;
    const input: ReplicaInput = { ...genuineInput, profile: earlier, seq: 92 };
    const outcome = await withClient(async (client) => {
      const handle = await client.workflow.start('replica', { taskQueue: 'llmgw', workflowId: replicaId, args: [input] });
      return Promise.race([
        handle.result().then(
          () => 'completed',
          (error: unknown) => causes(error),
        ),
        sleep(30_000).then(() => 'still running'),
      ]);
    });
    expect(outcome).toMatch(new RegExp(`its revision is not one deployment ${name} runs now \\(${view.revision}\\): nothing is placed`));
    for (const nodeId of nodeIds) expect((await nodeView(nodeId)).allocations.map((a) => a.replicaId)).not.toContain(replicaId);
    expect(enginesOf(nodeIds).filter((e) => e.env.LLMGW_REPLICA_ID === replicaId)).toEqual([]);
    await withClient((client) => client.workflow.getHandle(replicaId).terminate('test over')).catch(() => undefined);
    await undeploy(name);
  });

  it('withdraws the route of a revision the catalog revokes, and does not restart its engine after a crash', async () => {
    const name = uniqueId('sig-revoke');
    const view = await deploy('life', name, 1, 'one-gpu');
    expect(await routed(name)).toBe(true);
    const replicaId = view.replicas[0]!.replicaId;
    const original = readFileSync(catalogFile, 'utf8');
    try {
      writeFileSync(catalogFile, `${original.trimEnd()}\nrevoked:\n  - ${view.revision}\n`);
      // The catalog watcher has the routes signed again: this replica's is withdrawn everywhere.
      const routeOf = async (): Promise<string> =>
        withClient(async (client) => {
          const table = await client.workflow.getHandle(ROUTES_WORKFLOW_ID).query(routesQuery);
          const route = table.routes.find((r) => r.replicaId === replicaId);
          return route?.signature ? 'signed' : 'withdrawn';
        });
      await expect.poll(routeOf, { timeout: 30_000, interval: 500 }).toBe('withdrawn');
      await expect.poll(() => routed(name).catch(() => false), { timeout: 15_000, interval: 500 }).toBe(false);

      // Reconciliation stops its engine within seconds (test/e2e/revocation.test.ts); if it has
      // not yet, the engine crashes: the replica asks for its tickets again, and gets none.
      const engine = enginesOf(nodeIds).find((e) => e.env.LLMGW_REPLICA_ID === replicaId);
      if (engine) signalGroup(engine.pid, 'SIGKILL');
      await sleep(15_000);
      const again = enginesOf(nodeIds).filter((e) => e.env.LLMGW_REPLICA_ID?.startsWith(`replica/${name}/`));
      expect(again).toEqual([]);
      expect(await routeOf()).toBe('withdrawn');
    } finally {
      writeFileSync(catalogFile, original);
    }
    await undeploy(name);
  });

  it("routes an --engine-tls agent's engine over TLS, pinned to the certificate its agent attested", async () => {
    const tlsNode = uniqueId('sig-tls');
    raceNodes.push(tlsNode);
    // RACE: only this agent has the class, so the deployment lands on it.
    await startAgent(tlsNode, join(inventoryDir, 'racex8.yaml'), {}, true, ['--engine-tls']);
    await eventually('the TLS node enrolled', async () => (await nodeView(tlsNode)).enrolled, 30_000);
    const name = uniqueId('sig-tls');
    const view = await deploy('race', name, 1, 'one-gpu');
    expect(await routed(name)).toBe(true);
    const replicaId = view.replicas[0]!.replicaId;
    const leader = (await withClient((client) => client.workflow.getHandle(replicaId).query(replicaStatusQuery))).shards.find(
      (s) => s.rank === 0,
    )!;
    const pin = attestedTlsFingerprint(leader.attestation!);
    expect(pin).toMatch(/^[0-9a-f]{64}$/);
    const table = await withClient((client) => client.workflow.getHandle(ROUTES_WORKFLOW_ID).query(routesQuery));
    const route = table.routes.find((r) => r.replicaId === replicaId)!;
    expect(route.tlsPin).toBe(pin);
    expect(route.endpoint).toMatch(/^https:\/\//);
    // The pin is the certificate the engine serves.
    const url = new URL(route.endpoint);
    const socket = connect({ host: url.hostname, port: Number(url.port), rejectUnauthorized: false });
    await once(socket, 'secureConnect');
    expect(peerPin(socket)).toBe(pin);
    socket.destroy();
    await undeploy(name);
  });
});
