// The fake engine's LoRA adapters, as vLLM serves them at run time: the flags, load and unload,
// slots (a load beyond --max-loras is refused), ranks over --max-lora-rank refused, adapters in
// /v1/models with their parent, requests for an adapter only while it is loaded, and vLLM's
// lora_requests_info gauge.
import { mkdtempSync, mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { parseFakeEngineArgs } from '../../fake-engine/options.js';
import { words } from '../helpers/command-line.js';
import { base, client, start, useFakeEngineHarness } from '../helpers/fake-engine-harness.js';
import { adaptersByReplica, adaptersCell } from '../../cli/actions/adapters-view.js';
import type { DeploymentView } from '../../common/replica-types.js';

useFakeEngineHarness();
const dir = mkdtempSync(join(tmpdir(), 'llmgw-lora-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

function adapterDir(name: string, rank: number): string {
  const path = join(dir, name);
  mkdirSync(path, { recursive: true });
  writeFileSync(join(path, 'adapter_config.json'), JSON.stringify({ r: rank }));
  return path;
}

const post = (url: string, path: string, body: object) =>
  fetch(`${url}${path}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });

describe('fake engine: LoRA adapters', () => {
  it("takes vLLM's flags", () => {
    const o = parseFakeEngineArgs(words('serve m --port 1 --enable-lora --max-loras 3 --max-lora-rank 32 --lora-load-time 0.5'));
    expect(o.lora).toEqual({ maxLoras: 3, maxLoraRank: 32, loadTimeS: 0.5 });
    expect(parseFakeEngineArgs(['--port', '1']).lora).toBeUndefined();
  });

  it('loads into its slots, refuses beyond them and over its rank, serves only what is loaded, and unloads', async () => {
    const engine = await start({ lora: { maxLoras: 2, maxLoraRank: 16, loadTimeS: 0 } });
    const url = base(engine);
    const openai = client(engine);
    const ask = (model: string) => openai.chat.completions.create({ model, messages: [{ role: 'user', content: 'hi' }], max_tokens: 2 });

    await expect(ask('sql')).rejects.toMatchObject({ status: 404 });
    expect(await (await post(url, '/v1/load_lora_adapter', { lora_name: 'sql', lora_path: adapterDir('sql', 8) })).text()).toMatch(
      /added successfully/,
    );
    expect((await ask('sql')).model).toBe('sql');
    const again = await post(url, '/v1/load_lora_adapter', { lora_name: 'sql', lora_path: adapterDir('sql', 8) });
    expect(again.status).toBe(400);
    expect(((await again.json()) as { message: string }).message).toMatch(/already been loaded/);
    const big = await post(url, '/v1/load_lora_adapter', { lora_name: 'big', lora_path: adapterDir('big', 64) });
    expect(((await big.json()) as { message: string }).message).toMatch(/rank 64 is greater than max_lora_rank 16/);
    await post(url, '/v1/load_lora_adapter', { lora_name: 'chat', lora_path: adapterDir('chat', 8) });
    const full = await post(url, '/v1/load_lora_adapter', { lora_name: 'code', lora_path: adapterDir('code', 8) });
    expect(full.status).toBe(400);
    expect(((await full.json()) as { message: string }).message).toMatch(/all 2 LoRA slots are taken/);

    const models = (await (await fetch(`${url}/v1/models`)).json()) as { data: Array<{ id: string; parent: string | null }> };
    expect(models.data.filter((m) => m.parent !== null).map((m) => [m.id, m.parent])).toEqual([
      ['sql', 'fake/tiny'],
      ['chat', 'fake/tiny'],
    ]);
    expect(await (await fetch(`${url}/metrics`)).text()).toMatch(
      /vllm:lora_requests_info\{max_lora="2",running_lora_adapters="",waiting_lora_adapters=""\} \d/,
    );

    expect((await post(url, '/v1/unload_lora_adapter', { lora_name: 'sql' })).status).toBe(200);
    expect((await post(url, '/v1/unload_lora_adapter', { lora_name: 'sql' })).status).toBe(404);
    await expect(ask('sql')).rejects.toMatchObject({ status: 404 });
  });

  it('shows in `llmgw status` which adapters each Ready replica holds, read from its engine', async () => {
    const engine = await start({ lora: { maxLoras: 2, maxLoraRank: 16, loadTimeS: 0 } });
    await post(base(engine), '/v1/load_lora_adapter', { lora_name: 'sql', lora_path: adapterDir('sql2', 8) });
    const replica = (replicaId: string, endpoint: string) =>
      ({ replicaId, phase: 'Ready', endpoint }) as DeploymentView['replicas'][number];
    const view = { replicas: [replica('replica/d/1', base(engine)), replica('replica/d/2', 'http://127.0.0.1:1')] } as DeploymentView;
    const adapters = await adaptersByReplica(view);
    expect(adaptersCell(adapters, 'replica/d/1')).toBe('sql');
    expect(adaptersCell(adapters, 'replica/d/2')).toBe('?');
  });
});
