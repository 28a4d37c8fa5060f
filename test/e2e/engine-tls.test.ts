// TLS between routers and engines (issue 37, --engine-tls): a real agent starts a fake engine that
// serves HTTPS with a certificate the agent issued, attests that certificate's pin with its own
// key, and a router given the pin (as a signed route carries it) serves through it; plain HTTP to
// the engine's port gets nothing, and an engine with another certificate on the same address and
// port (the attacker) is refused by the router before a prompt reaches it.
import { existsSync, mkdtempSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { connect, type TLSSocket } from 'node:tls';
import { once } from 'node:events';
import { create } from '@bufbuild/protobuf';
import { fetch as undiciFetch } from 'undici';
import { describe, expect, it } from 'vitest';
import {
  StopShardSchema,
  WaitHealthySchema,
  type RunningShard,
  type ShardStatus,
  type StopShardResult,
} from '../../proto/gen/llmgw/v1/shard_pb.js';
import { attestedTlsFingerprint } from '../../common/endpoint-attestation.js';
import { peerPin, pinnedDispatcher } from '../../common/engine-tls.js';
import { issueEngineCertificate } from '../../common/self-signed-cert.js';
import { uniqueId } from '../helpers/temporal.js';
import { useCallWorker } from '../helpers/call-worker.js';
import { randomPortRange, startTcpAgent } from '../helpers/fleet.js';
import { fakeShardSpec } from '../helpers/shards.js';
import { engine, router, useRouterHarness } from '../helpers/router-harness.js';
import { waitFor } from '../helpers/poll.js';
import type { FakeEngine } from '../../fake-engine/server.js';

const nodeId = uniqueId('engine-tls');
const calls = useCallWorker('engine-tls-calls', [nodeId]);
useRouterHarness();

/** The pin of the certificate whatever listens on `port` presents (no trust: only looked at). */
async function servedPin(port: number): Promise<string | undefined> {
  const socket: TLSSocket = connect({ host: '127.0.0.1', port, rejectUnauthorized: false });
  await once(socket, 'secureConnect');
  const pin = peerPin(socket);
  socket.destroy();
  return pin;
}

const chat = (model: string) => JSON.stringify({ model, max_tokens: 2, messages: [{ role: 'user', content: 'a secret prompt' }] });

describe('engine TLS', () => {
  it('serves through a router pinned to the certificate its agent issued; plain HTTP and another certificate on that port get nothing', async () => {
    const { proc: agent, stateDir } = await startTcpAgent(nodeId, {
      gpus: 'builtin:h100x8',
      env: {},
      range: randomPortRange(20),
      extra: ['--reconcile', 'dry-run', '--engine-tls'],
    });
    expect(agent.output()).toContain('engines serve HTTPS with a certificate this agent issues');
    const spec = fakeShardSpec({ nodeId, deployment: 'engine-tls', gpus: [0], args: ['--load-time', '0'] });
    // One run chain starts, waits for and stops the engine, as its replica does.
    const replica = await calls.session(nodeId, spec.replicaId);
    await replica.call<RunningShard>('startShard', spec);
    // Asked by the replica's own workflow id, so the agent attests the endpoint (with the pin).
    const ready = await replica.call<ShardStatus>('waitHealthy', create(WaitHealthySchema, { shardId: spec.shardId, timeoutSeconds: 30 }));
    const port = ready.httpPort;
    const pin = attestedTlsFingerprint(ready.endpointAttestation);
    expect(pin).toMatch(/^[0-9a-f]{64}$/);
    expect(await servedPin(port)).toBe(pin);

    // The key is the engine's alone (0600), and none of it is in the agent's log.
    const keyFile = join(stateDir, 'engine-tls', `${spec.shardId}.key`);
    expect(statSync(keyFile).mode & 0o777).toBe(0o600);
    if (process.getuid?.() === 0) expect(statSync(keyFile).uid).not.toBe(0);
    const keyBody = readFileSync(keyFile, 'utf8').split('\n')[1]!;
    expect(agent.output()).not.toContain(keyBody);

    // Plain HTTP to the engine's port is not served.
    await expect(fetch(`http://127.0.0.1:${port}/health`, { signal: AbortSignal.timeout(5000) })).rejects.toThrow();

    const endpoint = `https://127.0.0.1:${port}`;
    const pinned = await router([{ servedName: 'engine-tls', endpoint, tlsPin: pin! }]);
    const served = await fetch(`${pinned.base}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: chat('engine-tls'),
    });
    expect(served.status).toBe(200);

    // The engine goes (its certificate and key with its record); an attacker's engine with a
    // certificate of its own takes the same address and port.
    const stopped = await replica.call<StopShardResult>(
      'stopShard',
      create(StopShardSchema, { shardId: spec.shardId, replicaId: spec.replicaId, graceSeconds: 5 }),
    );
    await replica.end();
    expect(stopped.wasRunning).toBe(true);
    expect(existsSync(keyFile)).toBe(false);
    const dir = mkdtempSync(join(tmpdir(), 'llmgw-attacker-tls-'));
    const forged = issueEngineCertificate('127.0.0.1');
    writeFileSync(join(dir, 'cert.pem'), forged.certPem);
    writeFileSync(join(dir, 'key.pem'), forged.keyPem, { mode: 0o600 });
    const tls = { certFile: join(dir, 'cert.pem'), keyFile: join(dir, 'key.pem') };
    let attacker: FakeEngine | undefined;
    await waitFor(async () => {
      attacker = await engine({ port, servedModelNames: ['engine-tls'], tls }).catch(() => undefined);
      return attacker !== undefined;
    }, 10_000);
    expect(await servedPin(attacker!.port)).toBe(forged.fingerprint);

    const refused = await fetch(`${pinned.base}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: chat('engine-tls'),
    });
    expect(refused.status).not.toBe(200);
    await refused.body?.cancel();
    // Not one prompt reached it: its own count, read with its own pin.
    const metrics = await (await undiciFetch(`${endpoint}/metrics`, { dispatcher: pinnedDispatcher(forged.fingerprint) })).text();
    expect(metrics).toMatch(/^vllm:request_success_total\{[^}]*\} 0$/m);
  }, 40_000);
});
