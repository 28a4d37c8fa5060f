// The stand-in hub is faithful: the official Python huggingface_hub client downloads its
// repositories (snapshot_download over HF_ENDPOINT) byte for byte, resumes a cut file with a
// range request, and follows a moved branch; so what llmgw fetches from it, it would fetch
// from the hub.
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startStandInHub, type StandInHub } from '../helpers/stand-in-hub.js';
import { HASH_SNAPSHOT, hfPythonMissing, runHfPython } from '../helpers/hf-python.js';

let hub: StandInHub;
const REPO = 'llmgw-test/faithful';
const FILES = [
  { path: 'config.json', size: 600 },
  { path: 'tokenizer.json', size: 4000 },
  { path: 'model-00001-of-00002.safetensors', size: 3_000_000 },
  { path: 'model-00002-of-00002.safetensors', size: 2_500_000 },
  { path: 'original/params.bin', size: 70_000 },
];

beforeAll(async () => {
  hub = await startStandInHub();
});
afterAll(async () => {
  await hub?.close();
});

describe('the stand-in hub', () => {
  it('serves python huggingface_hub snapshot_download byte for byte, and a moved main', async () => {
    const missing = hfPythonMissing();
    if (missing) throw new Error(missing);
    const first = hub.addRepo({ repo: REPO, files: FILES });
    const cache = mkdtempSync(join(tmpdir(), 'llmgw-hf-cache-'));
    const download = `${HASH_SNAPSHOT}
import json
from huggingface_hub import snapshot_download
path = snapshot_download('${REPO}', cache_dir='${cache}')
print(json.dumps({'path': path, 'files': hash_tree(path)}))
`;
    const got = await runHfPython<{ path: string; files: Record<string, string> }>(download, { HF_ENDPOINT: hub.url });
    expect(got.path).toBe(join(cache, 'models--llmgw-test--faithful', 'snapshots', first));
    expect(got.files).toEqual(Object.fromEntries(hub.filesAt(REPO, first).map((f) => [f.path, f.sha256])));
    const total = FILES.reduce((sum, f) => sum + f.size, 0);
    expect(hub.bytesServed()).toBeGreaterThanOrEqual(total);
    expect(hub.bytesServed()).toBeLessThan(total * 1.01);

    // The branch moves: the client follows it to the new commit and fetches only the changed file.
    const second = hub.moveMain(REPO, ['model-00002-of-00002.safetensors']);
    hub.resetCounter();
    const again = await runHfPython<{ path: string; files: Record<string, string> }>(download, { HF_ENDPOINT: hub.url });
    expect(again.path.endsWith(second)).toBe(true);
    expect(again.files).toEqual(Object.fromEntries(hub.filesAt(REPO, second).map((f) => [f.path, f.sha256])));
    expect(hub.bytesServedFor('model-00002-of-00002.safetensors')).toBe(2_500_000);
    expect(hub.bytesServedFor('model-00001-of-00002.safetensors')).toBe(0);
  });

  it('answers a range request with 206 and the hub headers, and refuses a gated repo without a token', async () => {
    const commit = hub.addRepo({ repo: 'llmgw-test/ranges', files: [{ path: 'w.safetensors', size: 100_000 }] });
    const file = hub.filesAt('llmgw-test/ranges', commit)[0]!;
    const response = await fetch(`${hub.url}/llmgw-test/ranges/resolve/main/w.safetensors`, { headers: { Range: 'bytes=1000-' } });
    expect(response.status).toBe(206);
    expect(response.headers.get('content-range')).toBe(`bytes 1000-99999/100000`);
    expect(response.headers.get('x-repo-commit')).toBe(commit);
    expect(response.headers.get('x-linked-etag')).toBe(`"${file.sha256}"`);
    expect((await response.arrayBuffer()).byteLength).toBe(99_000);

    hub.addRepo({ repo: 'llmgw-test/gated', files: [{ path: 'config.json', size: 100 }], token: 'hf_test_token' });
    expect((await fetch(`${hub.url}/api/models/llmgw-test/gated/revision/main`)).status).toBe(401);
    const allowed = await fetch(`${hub.url}/api/models/llmgw-test/gated/revision/main`, {
      headers: { Authorization: 'Bearer hf_test_token' },
    });
    expect(allowed.status).toBe(200);
  });
});
