// TLS between routers and engines by pin (--engine-tls): the certificate the agent issues, the
// undici connector that accepts exactly the pinned certificate (the router's pools, the agent's
// health probes), the pin carried by the agent's endpoint attestation and the signed route, and
// the engines' command lines. Real TLS on loopback, no mocks.
import { X509Certificate, createHash } from 'node:crypto';
import { once } from 'node:events';
import { createServer, type Server } from 'node:https';
import type { AddressInfo } from 'node:net';
import { fetch as undiciFetch } from 'undici';
import { afterEach, describe, expect, it } from 'vitest';
import { buildEngineLaunch } from '../../agent/engines/index.js';
import { probeHealth } from '../../agent/supervisor/watch/health.js';
import { attestedTlsFingerprint, endpointAttestationProblem, signEndpointAttestation } from '../../common/endpoint-attestation.js';
import { pinnedDispatcher } from '../../common/engine-tls.js';
import { signRoute, verifyRoute, type SignedRouteFields } from '../../common/route-signature.js';
import { derInteger, issueEngineCertificate, type EngineCertificate } from '../../common/self-signed-cert.js';
import { Engine } from '../../proto/gen/llmgw/v1/shard_pb.js';
import { createUpstreamPool, DEFAULT_UPSTREAM } from '../../router/engines/upstream.js';
import { ctx, expectInvalidSpec, shard } from '../helpers/engine-launch.js';
import { agentRing, chatAttestation, newAgent, workerKey } from '../helpers/signers.js';

const servers: Server[] = [];
afterEach(async () => {
  await Promise.all(servers.splice(0).map((s) => new Promise((resolve) => s.close(resolve))));
});

/** An HTTPS server with `cert` on loopback that answers 200 and counts what reaches it. */
async function tlsServer(cert: EngineCertificate): Promise<{ url: string; requests: () => number }> {
  let requests = 0;
  const server = createServer({ cert: cert.certPem, key: cert.keyPem }, (_req, res) => {
    requests++;
    res.end('ok');
  });
  servers.push(server);
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  return { url: `https://127.0.0.1:${(server.address() as AddressInfo).port}`, requests: () => requests };
}

describe('the certificate the agent issues', () => {
  it('is a P-256 certificate for the advertised address, whose pin is the SHA-256 of its DER', () => {
    for (const address of ['198.18.0.7', 'fd00::7', 'gpu-7.internal']) {
      const issued = issueEngineCertificate(address);
      const cert = new X509Certificate(issued.certPem);
      expect(cert.verify(cert.publicKey)).toBe(true);
      expect(cert.publicKey.asymmetricKeyDetails?.namedCurve).toBe('prime256v1');
      expect(address.includes('.internal') ? cert.checkHost(address) : cert.checkIP(address)).toBe(address);
      expect(createHash('sha256').update(cert.raw).digest('hex')).toBe(issued.fingerprint);
    }
    expect(issueEngineCertificate('198.18.0.7').fingerprint).not.toBe(issueEngineCertificate('198.18.0.7').fingerprint);
  });

  it("encodes its serial as DER's one INTEGER (a random serial with a leading zero byte broke 1 start in 230)", () => {
    const hex = (bytes: number[]) => derInteger(Buffer.from(bytes)).toString('hex');
    expect(hex([0x00, 0x12, 0x34])).toBe('02021234');
    expect(hex([0x00, 0x00, 0x92])).toBe('02020092');
    expect(hex([0x92, 0x01])).toBe('0203009201');
    expect(hex([0x00])).toBe('020100');
    expect(hex([0x7f])).toBe('02017f');
  });
});

describe('pinning', () => {
  it("a router's pool reaches the pinned certificate, and refuses another before sending anything", async () => {
    const genuine = issueEngineCertificate('127.0.0.1');
    const other = issueEngineCertificate('127.0.0.1');
    const engine = await tlsServer(genuine);
    const pinned = createUpstreamPool(engine.url, DEFAULT_UPSTREAM, genuine.fingerprint);
    const res = await pinned.request({ method: 'GET', path: '/health' });
    expect(res.statusCode).toBe(200);
    await res.body.dump();
    await pinned.close();

    const attacker = await tlsServer(other);
    const refused = createUpstreamPool(attacker.url, DEFAULT_UPSTREAM, genuine.fingerprint);
    await expect(refused.request({ method: 'POST', path: '/v1/chat/completions', body: 'a prompt' })).rejects.toMatchObject({
      code: 'LLMGW_TLS_PIN_MISMATCH',
    });
    await refused.destroy();
    expect(attacker.requests()).toBe(0);
  });

  it('a pinned engine is reached over https only, and a CA-less client without the pin refuses it', async () => {
    const cert = issueEngineCertificate('127.0.0.1');
    const engine = await tlsServer(cert);
    const plain = createUpstreamPool(engine.url.replace('https:', 'http:'), DEFAULT_UPSTREAM, cert.fingerprint);
    await expect(plain.request({ method: 'GET', path: '/health' })).rejects.toMatchObject({ code: 'LLMGW_TLS_PIN_MISMATCH' });
    await plain.destroy();
    // No pin, no trust: an ordinary client finds no CA for it.
    await expect(fetch(`${engine.url}/health`)).rejects.toThrow();
    expect(engine.requests()).toBe(0);
  });

  it("the agent's health probe answers for the pinned certificate only", async () => {
    const cert = issueEngineCertificate('127.0.0.1');
    const engine = await tlsServer(cert);
    expect(await probeHealth(`${engine.url}/health`, 2000, cert.fingerprint)).toEqual({ ok: true });
    const wrong = await probeHealth(`${engine.url}/health`, 2000, issueEngineCertificate('127.0.0.1').fingerprint);
    expect(wrong.ok).toBe(false);
    expect(engine.requests()).toBe(1);
    const viaFetch = await undiciFetch(`${engine.url}/health`, { dispatcher: pinnedDispatcher(cert.fingerprint) });
    expect(viaFetch.status).toBe(200);
  });
});

describe('the pin, signed', () => {
  const identity = newAgent();
  const ring = agentRing(identity);
  const now = Date.now();
  const said = chatAttestation(now);
  const expected = { ...said, ticketIssuedAt: now - 1000 };
  const pin = issueEngineCertificate('10.0.0.5').fingerprint;

  it("is in the agent's endpoint attestation; an attestation without one verifies as before", () => {
    const withPin = signEndpointAttestation({ ...said, tlsFingerprint: pin }, ring);
    expect(endpointAttestationProblem(withPin, identity.publicKey, expected)).toBeUndefined();
    expect(attestedTlsFingerprint(withPin)).toBe(pin);
    const without = signEndpointAttestation(said, ring);
    expect(endpointAttestationProblem(without, identity.publicKey, expected)).toBeUndefined();
    expect(attestedTlsFingerprint(without)).toBeUndefined();
  });

  it('cannot be swapped or dropped in an attestation', () => {
    const text = signEndpointAttestation({ ...said, tlsFingerprint: pin }, ring);
    const [body, signature] = text.split('.') as [string, string];
    const pairs = JSON.parse(Buffer.from(body, 'base64url').toString()) as [string, unknown][];
    const swapped = pairs.map(([k, v]) => [k, k === 'tlsFingerprint' ? 'f'.repeat(64) : v]);
    const dropped = pairs.filter(([k]) => k !== 'tlsFingerprint');
    for (const forged of [swapped, dropped]) {
      const text2 = `${Buffer.from(JSON.stringify(forged)).toString('base64url')}.${signature}`;
      expect(endpointAttestationProblem(text2, identity.publicKey, expected)).toMatch(/does not verify/);
    }
  });

  it('is covered by the route signature; a route without one verifies as it did', () => {
    const { keys } = workerKey();
    const plain: SignedRouteFields = {
      replicaId: 'replica/chat/3',
      deployment: 'chat',
      servedName: 'chat',
      endpoint: 'http://10.0.0.5:30007',
      chain: 'c',
    };
    const plainSigned = { ...plain, signature: signRoute(plain, keys) };
    expect(verifyRoute(plainSigned, keys.all).ok).toBe(true);
    const tls: SignedRouteFields = { ...plain, endpoint: 'https://10.0.0.5:30007', tlsPin: pin };
    const tlsSigned = { ...tls, signature: signRoute(tls, keys) };
    expect(verifyRoute(tlsSigned, keys.all).ok).toBe(true);
    expect(verifyRoute({ ...tlsSigned, tlsPin: issueEngineCertificate('10.0.0.5').fingerprint }, keys.all).ok).toBe(false);
    const { tlsPin: _dropped, ...unpinned } = tlsSigned;
    expect(verifyRoute(unpinned, keys.all).ok).toBe(false);
  });
});

describe('engine command lines with --engine-tls', () => {
  const tls = { certFile: '/state/engine-tls/llama-3-r0.crt', keyFile: '/state/engine-tls/llama-3-r0.key' };
  const flags = ['--ssl-certfile', tls.certFile, '--ssl-keyfile', tls.keyFile];

  it('vLLM, SGLang and the fake engine take the certificate and key files', () => {
    for (const engine of [Engine.VLLM, Engine.SGLANG, Engine.FAKE]) {
      const argv = buildEngineLaunch(shard({ engine }), ctx({ tls })).processes[0]!.argv.join(' ');
      expect(argv).toContain(flags.join(' '));
      expect(buildEngineLaunch(shard({ engine }), ctx()).processes[0]!.argv).not.toContain('--ssl-certfile');
    }
  });

  it('refuses llama.cpp, whose llama-server here is built without SSL', () => {
    expectInvalidSpec(
      () => buildEngineLaunch(shard({ engine: Engine.LLAMACPP }), ctx({ tls, llamaServerCommand: ['/opt/llama-server'] })),
      /built without SSL/,
    );
  });
});
