// An agent killed -9 and started again at once, end to end on a real dev server: the new process
// registers while the old one's presence activity waits out its heartbeat timeout, and that
// timeout names the old process (its beats carry the agent's instance id), so the node stays
// Ready instead of flapping NotReady and telling its replicas so. A dead agent with no
// successor is still NotReady within the heartbeat timeout.
import { join } from 'node:path';
import type { temporal } from '@temporalio/proto';
import { describe, expect, it } from 'vitest';
import { describeNodeQuery } from '../../workflows/definitions.js';
import { recordHistory } from '../helpers/histories.js';
import { eventually, INVENTORIES, sleep, uniqueId, useIsolatedFleet } from '../helpers/fleet.js';

const fleet = useIsolatedFleet();
/** Long enough that the second agent surely registers before the first one's beats run out. */
const HEARTBEAT_SECONDS = 20;

const published = (e: temporal.api.history.v1.IHistoryEvent): string =>
  Buffer.from(e.upsertWorkflowSearchAttributesEventAttributes?.searchAttributes?.indexedFields?.LlmgwState?.data ?? []).toString();

describe('an agent replaced by a new process', () => {
  it('keeps its node Ready when the old process is killed -9 and a new one registers, and NotReady once the new one dies too', async () => {
    const nodeId = uniqueId('swap');
    const options = { inventory: join(INVENTORIES, 'swapx1.yaml'), extra: ['--presence-heartbeat-seconds', String(HEARTBEAT_SECONDS)] };
    const first = await fleet.agent(nodeId, options);
    const node = fleet.client.workflow.getHandle(`node/${nodeId}`);
    const phase = async (): Promise<string> => (await node.query(describeNodeQuery)).phase;
    expect(await phase()).toBe('Ready');
    const eventsBefore = (await node.fetchHistory()).events?.length ?? 0;

    await first.proc.kill9();
    const killedAt = Date.now();
    await fleet.agent(nodeId, { ...options, stateDir: first.stateDir });
    const registeredAfterMs = Date.now() - killedAt;
    expect(registeredAfterMs, 'the new agent registered only after the old one timed out').toBeLessThan(HEARTBEAT_SECONDS * 1000);

    // The old presence times out HEARTBEAT_SECONDS after its last beat; watch the node past that.
    const seen = new Set<string>();
    for (const deadline = killedAt + (HEARTBEAT_SECONDS + 8) * 1000; Date.now() < deadline;) {
      seen.add(await phase());
      await sleep(500);
    }
    const events = ((await node.fetchHistory()).events ?? []).slice(eventsBefore);
    const timedOut = events.filter((e) => e.activityTaskTimedOutEventAttributes);
    expect(timedOut.length, "the old process's presence never timed out: this run shows nothing").toBeGreaterThan(0);
    expect([...seen]).toEqual(['Ready']);
    expect(events.map(published).filter((state) => state.includes('NotReady'))).toEqual([]);
    console.log(`new agent registered ${registeredAfterMs} ms after kill -9; old presence timed out; node Ready throughout`);

    // The new process dies with nobody after it: that is a dead agent.
    const diedAt = Date.now();
    await fleet.agentOf(nodeId).kill9();
    await eventually('NotReady', async () => ((await phase()) === 'NotReady' ? true : undefined), (HEARTBEAT_SECONDS + 15) * 1000);
    // Replayed in CI: the replaced process's presence ending, then a dead one.
    recordHistory(`node/${nodeId}`, 'node-agent-replaced-then-dead');
    console.log(`NotReady ${Date.now() - diedAt} ms after the new agent's kill -9 (heartbeat timeout ${HEARTBEAT_SECONDS} s)`);
  }, 150_000);
});
