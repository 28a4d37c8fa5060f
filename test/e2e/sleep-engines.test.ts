// Sleep and wake on the engine layer (docs/sleep.md): the agent's sleep activities over its
// supervisor, on fake engines that share one simulated GPU through the host's ledger, and on
// llama.cpp's llama-server with the real Gemma 3 270M, which sleeps itself when idle.
import { readFileSync } from 'node:fs';
import { ApplicationFailure } from '@temporalio/common';
import { describe, expect, it } from 'vitest';
import { createSleepActivities } from '../../agent/sleep.js';
import { runningWithSleep } from '../../agent/host/describe-and-survey.js';
import { entries, gpuUsedMib, writeGpuTotal } from '../../common/sim-gpu-ledger.js';
import { FailureType } from '../../common/failures.js';
import { Engine } from '../../proto/gen/llmgw/v1/shard_pb.js';
import { FAKE_ENGINE, agentHost, fakeSpec, tempDir, useSupervisorHarness } from '../helpers/supervisor.js';
import { gemmaGguf, llamaServerBinary, llamaServerMissing } from '../helpers/llama-server.js';

useSupervisorHarness();

/** One simulated GPU of 1000 MiB; an engine takes 0.6 of it (400 MiB weights, 200 MiB KV cache): one fits awake. */
const GPU_MIB = 1000;
const WAKE_S = 0.8;
const SLEEPER = ['--enable-sleep-mode', '--gpu-memory-utilization', '0.6', '--weights-mib', '400', '--wake-seconds', String(WAKE_S)];

async function failureOf(promise: Promise<unknown>): Promise<ApplicationFailure> {
  try {
    await promise;
  } catch (err) {
    if (err instanceof ApplicationFailure) return err;
    throw err;
  }
  throw new Error('expected a failure');
}

function chat(base: string, timeoutMs = 10_000): Promise<Response> {
  return fetch(`${base}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'demo', messages: [{ role: 'user', content: 'hello' }], max_tokens: 4 }),
    signal: AbortSignal.timeout(timeoutMs),
  });
}

describe('fake engines asleep and awake on one simulated GPU', () => {
  it('sleep frees the GPU, requests wait, a wake takes its time, and a wake that does not fit fails as CUDA does', async () => {
    const host = await agentHost('sleepy', 6);
    const ledger = tempDir();
    writeGpuTotal(ledger, 0, GPU_MIB);
    const { sup } = host.startAgent({ engineContext: { fakeEngineCommand: FAKE_ENGINE, simulatedGpuLedger: ledger } });
    const sleepSpec = (shardId: string, args = SLEEPER, gpus = [0]) => {
      const spec = fakeSpec(host.node, shardId, args, gpus);
      spec.profile!.env = { VLLM_SERVER_DEV_MODE: '1' };
      return spec;
    };
    const activities = createSleepActivities(sup);

    await sup.start(sleepSpec('a'));
    await sup.waitHealthy('a', 20);
    const a = sup.engineAccess('a')!.baseUrl;
    expect(gpuUsedMib(ledger, 0)).toBe(600);
    expect(await activities.shardSleepState({ shardId: 'a' })).toEqual({ shardId: 'a', sleeping: false });

    const slept = await activities.sleepShard({ shardId: 'a', level: 1 });
    expect(slept.level).toBe(1);
    expect(await (await fetch(`${a}/is_sleeping`)).json()).toEqual({ is_sleeping: true });
    expect(gpuUsedMib(ledger, 0)).toBe(0);
    expect(entries(ledger, 0).get('a')).toMatchObject({ gpuMib: 0, hostMib: 400, sleeping: true });
    expect(await activities.shardSleepState({ shardId: 'a' })).toEqual({ shardId: 'a', sleeping: true, level: 1 });
    // Asleep, vLLM takes a request and schedules nothing until it wakes; /health stays 200.
    const held = chat(a);
    const early = await Promise.race([held.then(() => 'answered'), new Promise((r) => setTimeout(() => r('waiting'), 1000))]);
    expect(early).toBe('waiting');
    expect((await fetch(`${a}/health`)).status).toBe(200);

    const woke = await activities.wakeShard({ shardId: 'a' });
    console.log(`fake engine: slept in ${slept.tookMs} ms, woke in ${woke.tookMs} ms (modelled ${WAKE_S * 1000} ms)`);
    expect(woke.tookMs).toBeGreaterThanOrEqual(WAKE_S * 1000 - 50);
    expect(woke.tookMs).toBeLessThan(WAKE_S * 1000 + 1500);
    expect((await held).status).toBe(200);
    expect((await chat(a)).status).toBe(200);
    expect(gpuUsedMib(ledger, 0)).toBe(600);
    expect((await activities.wakeShard({ shardId: 'a' })).tookMs).toBe(0);

    // A second sleeper on the same GPU starts while the first sleeps; waking the first then does not fit.
    await activities.sleepShard({ shardId: 'a', level: 1 });
    await sup.start(sleepSpec('b'));
    await sup.waitHealthy('b', 20);
    expect(gpuUsedMib(ledger, 0)).toBe(600);
    const oom = await failureOf(activities.wakeShard({ shardId: 'a' }));
    expect(oom.type).toBe(FailureType.WakeOutOfMemory);
    expect(oom.nonRetryable).toBe(true);
    expect(oom.message).toMatch(
      /CUDA out of memory\. Tried to allocate 600 MiB\. GPU 0 has a total capacity of 1000 MiB of which 400 MiB is free/,
    );
    expect((await activities.shardSleepState({ shardId: 'a' })).sleeping).toBe(true);
    await activities.sleepShard({ shardId: 'b', level: 2 });
    expect(entries(ledger, 0).get('b')).toMatchObject({ gpuMib: 0, hostMib: 0 });
    expect((await activities.wakeShard({ shardId: 'a' })).tookMs).toBeGreaterThan(0);
    expect((await chat(a)).status).toBe(200);
    expect(gpuUsedMib(ledger, 0)).toBe(600);

    // Only engines able to sleep share a GPU: one that cannot is refused where they run.
    const shared = await failureOf(sup.start(fakeSpec(host.node, 'c', [], [0])));
    expect(shared.type).toBe(FailureType.PlacementRefused);
    expect(shared.message).toMatch(/GPU 0 is held by shard a/);
    // An engine started without sleep mode is refused, saying what to set.
    await sup.start(fakeSpec(host.node, 'c', [], [1]));
    await sup.waitHealthy('c', 20);
    // The agent's reports (registration, survey: what adoption reads) say which engines sleep.
    const reported = new Map((await runningWithSleep(sup)).map((shard) => [shard.spec?.shardId, shard.sleeping]));
    expect(Object.fromEntries(reported)).toEqual({ a: false, b: true, c: undefined });
    const refused = await failureOf(activities.sleepShard({ shardId: 'c', level: 1 }));
    expect(refused.type).toBe(FailureType.SleepUnsupported);
    expect(refused.nonRetryable).toBe(true);
    expect(refused.message).toMatch(/--enable-sleep-mode and VLLM_SERVER_DEV_MODE=1.*sleep: \{afterSeconds: N\}/);
  }, 60_000);
});

const missing = llamaServerMissing();

function rssKib(pid: number): number {
  const line = readFileSync(`/proc/${pid}/status`, 'utf8')
    .split('\n')
    .find((l) => l.startsWith('VmRSS:'));
  return Number(line?.split(/\s+/)[1] ?? NaN);
}

describe.skipIf(missing !== undefined)('llama.cpp asleep and awake', () => {
  it('Gemma 3 270M falls asleep when idle, its resident memory falls, and a wake answers with text', async () => {
    const host = await agentHost('llamasleep', 2);
    const { sup } = host.startAgent({
      engineContext: { fakeEngineCommand: FAKE_ENGINE, llamaServerCommand: [llamaServerBinary()], hostCpus: 2, hostGpus: 1 },
    });
    const spec = fakeSpec(host.node, 'g', ['--ctx-size', '2048', '--parallel', '1', '--sleep-idle-seconds', '2'], [0]);
    spec.profile!.engine = Engine.LLAMACPP;
    spec.profile!.modelSource = `file://${gemmaGguf().replace(/\/[^/]+$/, '')}`;
    spec.profile!.servedName = 'gemma';
    spec.startupTimeoutSeconds = 60;
    await sup.start(spec);
    await sup.waitHealthy('g', 60);
    const activities = createSleepActivities(sup);
    const base = sup.engineAccess('g')!.baseUrl;
    const pid = sup.status('g')!.pid;
    const complete = async () => {
      const res = await fetch(`${base}/v1/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ prompt: 'The capital of France is', max_tokens: 6, temperature: 0 }),
      });
      return ((await res.json()) as { choices: { text: string }[] }).choices[0]!.text;
    };
    expect(await complete()).toMatch(/\S/);
    const awakeKib = rssKib(pid);

    const slept = await activities.sleepShard({ shardId: 'g', level: 1 });
    expect(slept.level).toBe(2);
    expect((await activities.shardSleepState({ shardId: 'g' })).sleeping).toBe(true);
    const asleepKib = rssKib(pid);
    expect(asleepKib).toBeLessThan(awakeKib * 0.6);

    const woke = await activities.wakeShard({ shardId: 'g' });
    const text = await complete();
    console.log(
      `llama.cpp Gemma 3 270M: RSS ${Math.round(awakeKib / 1024)} MiB awake, ${Math.round(asleepKib / 1024)} MiB asleep; ` +
        `fell asleep ${slept.tookMs} ms after the call (idle 2 s), woke in ${woke.tookMs} ms; then "${text.trim()}"`,
    );
    expect(text).toMatch(/\S/);
    expect(rssKib(pid)).toBeGreaterThan(asleepKib);
  }, 60_000);
});
