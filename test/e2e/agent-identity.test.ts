// Agent identity, end to end (issue 37): a namespace member re-sends a node's `register` signal
// with an address of its own (127.0.0.2, where it listens on every engine port of the host). The
// node keeps its agent's address, and a deploy and a request through a router send nothing there.
// An agent nobody enrolled is shown Unenrolled, with the command that enrolls it, and gets
// nothing placed until `llmgw nodes enroll`.
import { createServer, type Server } from 'node:http';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Register } from '../../proto/gen/llmgw/v1/register_pb.js';
import { payloadConverter } from '../../common/payload-converter.js';
import type { NodeView } from '../../common/node-types.js';
import type { DeploymentView } from '../../common/replica-types.js';
import { deploymentStatusQuery, describeNodeQuery, registerSignal } from '../../workflows/definitions.js';
import { eventually, INVENTORIES, runLlmgw, sleep, uniqueId, useIsolatedFleet } from '../helpers/fleet.js';
import { spawnTestRouter, type TestRouter } from '../helpers/router-process.js';

const IDENT = join(INVENTORIES, 'identx8.yaml');
const ATTACKER = '127.0.0.2';
const fleet = useIsolatedFleet({ gpuClass: 'IDENT' });
const listeners: Server[] = [];
let attackerHits = 0;
let router: TestRouter;

function node(nodeId: string): Promise<NodeView> {
  return fleet.client.workflow.getHandle(`node/${nodeId}`).query(describeNodeQuery);
}

function deployment(name: string): Promise<DeploymentView> {
  return fleet.client.workflow.getHandle(`deployment/${name}`).query(deploymentStatusQuery);
}

/** The attacker listens on its own address at every port of the agent's engine range. */
async function listenAsAttacker(from: number, to: number): Promise<void> {
  for (let port = from; port <= to; port++) {
    const server = createServer((_req, res) => {
      attackerHits++;
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(
        JSON.stringify({ id: 'x', object: 'chat.completion', choices: [{ index: 0, message: { role: 'assistant', content: 'pwned' } }] }),
      );
    });
    await new Promise<void>((resolve, reject) => server.once('error', reject).listen(port, ATTACKER, resolve));
    listeners.push(server);
  }
}

/** The registration the agent signalled last, as anyone who can read the node's history sees it. */
async function lastRegistration(nodeId: string): Promise<unknown[]> {
  const history = await fleet.client.workflow.getHandle(`node/${nodeId}`).fetchHistory();
  const signalled = (history.events ?? [])
    .map((e) => e.workflowExecutionSignaledEventAttributes)
    .filter((s) => s?.signalName === 'register');
  const payloads = signalled.at(-1)?.input?.payloads ?? [];
  return payloads.map((p) => payloadConverter.fromPayload(p));
}

async function chat(model: string): Promise<number> {
  const res = await fetch(`${router.url}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model, max_tokens: 2, messages: [{ role: 'user', content: 'ping' }] }),
  });
  await res.text();
  return res.status;
}

beforeAll(async () => {
  router = await spawnTestRouter();
});

afterAll(async () => {
  await router?.proc.stop(5_000);
  await Promise.all(listeners.map((s) => new Promise((resolve) => s.close(resolve))));
});

describe('agent identity', () => {
  it('a register re-sent with another address changes nothing and draws no request there', async () => {
    const nodeId = uniqueId('ident');
    const from = 36000 + Math.floor(Math.random() * 90) * 10;
    await listenAsAttacker(from, from + 4);
    await fleet.agent(nodeId, { inventory: IDENT, range: `${from}-${from + 4}` });
    await eventually('the node Ready', async () => ((await node(nodeId)).phase === 'Ready' ? true : undefined), 30_000);

    // The genuine registration unchanged, replayed; then with the attacker's address, with the
    // agent's proof and without.
    const [genuine, settings, proof] = (await lastRegistration(nodeId)) as [Register, unknown, unknown];
    const forged: Register = { ...genuine, managementAddress: ATTACKER };
    const handle = fleet.client.workflow.getHandle(`node/${nodeId}`);
    const send = handle.signal.bind(handle) as (def: typeof registerSignal, ...args: unknown[]) => Promise<void>;
    await send(registerSignal, genuine, settings, proof);
    await send(registerSignal, forged, settings, proof);
    await send(registerSignal, forged, settings);
    const worker = fleet.workers[0]!;
    const refusals = (): number => worker.output().split(`registration for node ${nodeId} was refused`).length - 1;
    // Each is refused and logged once (the code before agent keys acts on them instead: no line).
    await eventually('three refusals logged', () => (refusals() >= 3 ? true : undefined), 20_000).catch(() => undefined);
    expect((await node(nodeId)).inventory?.managementAddress).toBe('127.0.0.1');

    const name = uniqueId('ident-dep');
    const deployed = await runLlmgw(['deploy', 'ident', '--name', name, '--replicas', '1', '--wait', '--timeout', '90']);
    expect(deployed.code, deployed.output).toBe(0);
    const [replica] = (await deployment(name)).replicas;
    expect(replica?.endpoint).toMatch(/^http:\/\/127\.0\.0\.1:/);
    for (let i = 0; i < 5; i++) expect(await chat(name)).toBe(200);
    expect(attackerHits).toBe(0);
    expect((await node(nodeId)).inventory?.managementAddress).toBe('127.0.0.1');
    expect(refusals()).toBe(3);
  });

  it('an unenrolled agent is shown as such, gets nothing placed, and takes replicas once enrolled', async () => {
    const nodeId = uniqueId('unenrolled');
    const started = await fleet.agent(nodeId, { inventory: IDENT, env: { LLMGW_AGENT_ENROLL_KEY_FILE: '' } });
    const key = /agent key (ed25519-public:[A-Za-z0-9_-]+)/.exec(started.proc.output())?.[1];
    expect(key, started.proc.output()).toBeDefined();
    const view = await eventually('the node registered', async () => {
      const v = await node(nodeId).catch(() => undefined);
      return v?.inventory ? v : undefined;
    });
    expect(view.enrolled).toBe(false);
    const listed = await runLlmgw(['nodes']);
    expect(listed.output).toMatch(new RegExp(`${nodeId}.*Unenrolled`));
    expect(listed.output).toContain(`llmgw nodes enroll ${nodeId} ${key}`);

    const name = uniqueId('ident-unenrolled');
    expect((await runLlmgw(['deploy', 'ident', '--name', name, '--replicas', '1'])).code).toBe(0);
    await sleep(5_000);
    const waiting = await deployment(name);
    expect(waiting.ready).toBe(0);
    expect(JSON.stringify(waiting.replicas.map((r) => r.reason))).toMatch(/Unenrolled/);
    expect((await node(nodeId)).allocations).toEqual([]);

    const enrolled = await runLlmgw(['nodes', 'enroll', nodeId, key!]);
    expect(enrolled.code, enrolled.output).toBe(0);
    expect((await node(nodeId)).enrolled).toBe(true);
    await eventually('Ready on the enrolled node', async () => ((await deployment(name)).ready === 1 ? true : undefined), 60_000);
  });
});
