// A bare hub id is a hub source: pinned to a commit at deploy like hf://, and a hub the control
// worker (or an agent) cannot reach is a failure that names HF_ENDPOINT and the source.
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { pinModelSource } from '../../activities/weights-pin.js';
import { WeightsError } from '../../agent/weights/errors.js';

const COMMIT = '0123456789abcdef0123456789abcdef01234567';
let hubUrl: string;
let closedUrl: string;
const server = createServer((req, res) => {
  // The hub's model info at the default branch: its commit.
  if (req.url?.startsWith('/api/models/org/name')) {
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(JSON.stringify({ id: 'org/name', sha: COMMIT }));
    return;
  }
  res.writeHead(404).end();
});

beforeAll(async () => {
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  hubUrl = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  // A port nothing listens on: a second server, closed.
  const closed = createServer();
  await new Promise<void>((resolve) => closed.listen(0, '127.0.0.1', resolve));
  closedUrl = `http://127.0.0.1:${(closed.address() as AddressInfo).port}`;
  await new Promise<void>((resolve) => closed.close(() => resolve()));
});

afterAll(() => new Promise<void>((resolve) => server.close(() => resolve())));

describe('a bare hub id', () => {
  it('is pinned to the commit its default branch names, as hf:// is', async () => {
    expect(await pinModelSource('org/name', { HF_ENDPOINT: hubUrl })).toBe(`hf://org/name@${COMMIT}`);
    expect(await pinModelSource('hf://org/name', { HF_ENDPOINT: hubUrl })).toBe(`hf://org/name@${COMMIT}`);
  });

  it('is refused with what to do when the hub cannot be reached', async () => {
    await expect(pinModelSource('org/name', { HF_ENDPOINT: closedUrl })).rejects.toThrow(
      new RegExp(
        `^cannot reach the hub at ${closedUrl.replace(/\./g, '\\.')} to pin org/name to a commit \\(fetch failed: ECONNREFUSED\\): set HF_ENDPOINT for the control worker \\(and the agents\\) to a hub they can reach, or give the model a source that needs none: file:///PATH \\(a directory every host mounts\\) or engine://org/name`,
      ),
    );
  });

  it('needs no hub as engine:// or file://', async () => {
    expect(await pinModelSource('engine://org/name', { HF_ENDPOINT: closedUrl })).toBe('engine://org/name');
    expect(await pinModelSource('/models/name', { HF_ENDPOINT: closedUrl })).toBe('/models/name');
  });
});

describe('an agent that cannot reach the hub', () => {
  it('says which hub, which revision and what to set, for the listing and for the bytes', () => {
    const listing = Object.assign(new TypeError('fetch failed'), { cause: { code: 'ECONNREFUSED' } });
    const bytes = Object.assign(new Error('connect ECONNREFUSED 10.0.0.9:443'), { code: 'ECONNREFUSED' });
    for (const error of [listing, bytes]) {
      const failure = WeightsError.fromHub(error, 'org/name', COMMIT, { hubUrl: 'https://hub.internal' }) as Error;
      expect(failure.message).toMatch(
        /^cannot reach the hub at https:\/\/hub\.internal for org\/name@0123456789ab \(.*ECONNREFUSED.*\): start this agent with HF_ENDPOINT set to a hub it can reach/,
      );
    }
    // An answer is not an unreachable hub.
    const refused = Object.assign(new Error('HTTP 500'), { statusCode: 500 });
    expect(WeightsError.fromHub(refused, 'org/name', COMMIT, {})).toBe(refused);
  });
});
