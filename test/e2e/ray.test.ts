// A real two-node Ray cluster, on two agents of this machine: a 2-rank replica whose profile
// uses the Ray launcher, with the fake engine standing in for `vllm serve`. Rank 0's agent
// starts the Ray head on the port it chose, rank 1's joins it, and the engine starts only
// once `ray status` shows both nodes; stopping the replica stops Ray on both. Needs Ray, which
// the test setup installs (test/setup/tools.ts; or LLMGW_RAY_COMMAND).
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { execFileSync } from 'node:child_process';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { deploymentStatusQuery } from '../../workflows/definitions.js';
import type { DeploymentView } from '../../common/replica-types.js';
import { parseRayStatusNodeCount } from '../../agent/engines/ray.js';
import { enginesOf, eventually, INVENTORIES, runLlmgw, uniqueId, useIsolatedFleet } from '../helpers/fleet.js';
import { rayCommand } from '../setup/tools.js';

const ray = rayCommand();
if (!existsSync(ray)) throw new Error(`${ray} is missing: npm test installs Ray in its global setup (test/setup/install-tools.ts)`);

const nodeIds = [uniqueId('ray-a'), uniqueId('ray-b')];
const name = uniqueId('raygang');
const fleet = useIsolatedFleet();

const status = (): Promise<DeploymentView> => fleet.client.workflow.getHandle(`deployment/${name}`).query(deploymentStatusQuery);

function rayStatus(address: string): string {
  try {
    return execFileSync(ray, ['status', '--address', address], { encoding: 'utf8', timeout: 60_000 });
  } catch (error) {
    return String((error as { stdout?: string }).stdout ?? error);
  }
}

beforeAll(async () => {
  // The venv's interpreter may live under /root (pyenv on CI), which the unprivileged engine user
  // cannot reach: Ray runs as the agent's user here.
  for (const nodeId of nodeIds)
    await fleet.agent(nodeId, { inventory: join(INVENTORIES, 'ray-ib-a.yaml'), extra: ['--ray-command', ray, '--engine-user', 'root'] });
});

afterAll(async () => {
  await runLlmgw(['undeploy', name]).catch(() => undefined);
});

describe('Ray launcher', () => {
  it('forms a real two-node Ray cluster before rank 0’s engine starts, serves, and stops Ray on both hosts with the replica', async () => {
    const deployed = await runLlmgw(['deploy', 'raygang', '--name', name, '--replicas', '1', '--wait', '--timeout', '240'], {}, 300_000);
    expect(deployed.code, deployed.output).toBe(0);
    const view = await status();
    const replica = view.replicas.find((r) => r.phase === 'Ready')!;
    const [rank0, rank1] = [...replica.shards].sort((a, b) => a.rank - b.rank);
    expect(rank0!.nodeId).not.toBe(rank1!.nodeId);

    // The order, from the agents' own logs: rank 1's Ray worker was started, the head saw
    // both nodes, and only then was the engine started.
    const leaderAgent = fleet.agentOf(rank0!.nodeId).output();
    const joined = leaderAgent.search(/all 2 Ray nodes joined at /);
    const engineStarted = leaderAgent.indexOf(`started the engine of shard ${rank0!.shardId}`);
    expect(joined, leaderAgent.slice(-3000)).toBeGreaterThan(0);
    expect(engineStarted).toBeGreaterThan(joined);
    const address = /all 2 Ray nodes joined at (\S+)/.exec(leaderAgent)![1]!;
    console.log(`ray: ${/all 2 Ray nodes joined at .*/.exec(leaderAgent)![0]}`);
    expect(parseRayStatusNodeCount(rayStatus(address))).toBe(2);

    // Ray runs on both hosts (the head and its raylet on one, a raylet on the other).
    for (const nodeId of nodeIds) expect(enginesOf([nodeId]).length).toBeGreaterThan(0);

    const undeployed = await runLlmgw(['undeploy', name]);
    expect(undeployed.code, undeployed.output).toBe(0);
    await eventually('no Ray process left on either host', () => enginesOf(nodeIds).length === 0, 60_000, 500).catch(() => {
      throw new Error(
        `still running: ${enginesOf(nodeIds)
          .map((e) => `${e.pid} ${e.env.LLMGW_SHARD_ID}`)
          .join(', ')}`,
      );
    });
  }, 400_000);
});
