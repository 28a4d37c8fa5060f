// `npm run check:gpu-host` (node dist/bench/gpu-host.js): what the agent does on a real GPU host,
// for the machine it runs on. The agent's own supervisor starts three fake-engine shards whose
// command first runs a CUDA probe (PyTorch) in the engine's environment: one given GPU 0, one
// given no GPU, one given no GPU by a profile that sets CUDA_VISIBLE_DEVICES=0 itself. Then a
// real `llmgw agent` process (Temporal unreachable on purpose: discovery, adoption and the admin
// API come before it) discovers the host with nvidia-smi and adopts the three engines; its admin
// Describe is compared with nvidia-smi asked directly. Prints `ok`/`MISS` per point and exits 1
// on a miss. Without PyTorch it checks each engine's environment and says CUDA went unasked;
// test/helpers/bin/nvidia-smi (with LLMGW_FAKE_SMI_HOST) stands in for a GPU host in the tests.
import { execFileSync, spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { create } from '@bufbuild/protobuf';
import { ADMIN_TOKEN_FILE, readTokenFile } from '../agent/admin/auth.js';
import { connectAdmin } from '../agent/admin/client.js';
import { killMarkedEngines } from '../agent/supervisor/processes/markers.js';
import { logPath } from '../agent/supervisor/spec-store.js';
import { createSupervisor } from '../agent/supervisor/supervisor.js';
import { findFreePort } from '../common/ports.js';
import { Engine, EngineProfileSchema, StartShardSchema, type StartShard } from '../proto/gen/llmgw/v1/shard_pb.js';

const BIN = resolve(__dirname, '../../bin/llmgw.js');
const PROBE_MARK = 'GPU-PROBE ';
// Runs in the engine's environment, as the agent spawned it: what CUDA lets this process see.
const PROBE_PY = `
import json, os
r = {"cvd": os.environ.get("CUDA_VISIBLE_DEVICES"), "order": os.environ.get("CUDA_DEVICE_ORDER")}
try:
    import torch
    n = torch.cuda.device_count()
    r["count"] = n
    r["uuids"] = [str(torch.cuda.get_device_properties(i).uuid) for i in range(n)]
    if n:
        r["sum"] = float(torch.ones(1 << 20, device="cuda").sum())
except Exception as e:
    r["error"] = repr(e)
print(${JSON.stringify(PROBE_MARK)} + json.dumps(r), flush=True)
`;
// The probe, then the fake engine in the same process (exec), so it is the engine's own environment.
const ENGINE_COMMAND = ['sh', '-c', 'python3 -c "$LLMGW_GPU_PROBE" 2>&1; exec "$@"', 'gpu-probe', process.execPath, BIN, 'fake-engine'];

interface Probe {
  cvd?: string;
  order?: string;
  count?: number;
  uuids?: string[];
  sum?: number;
  error?: string;
}

const misses: string[] = [];
function verdict(ok: boolean, text: string): void {
  console.log(`  ${ok ? 'ok  ' : 'MISS'} ${text}`);
  if (!ok) misses.push(text);
}

/** nvidia-smi asked directly: index → uuid, name. Empty when there is none. */
function nvidiaSmiGpus(): { index: number; uuid: string; name: string }[] {
  try {
    const out = execFileSync('nvidia-smi', ['--query-gpu=index,uuid,name', '--format=csv,noheader'], { encoding: 'utf8', timeout: 10_000 });
    return out
      .trim()
      .split('\n')
      .filter(Boolean)
      .map((line) => {
        const [index, uuid, name] = line.split(',').map((s) => s.trim());
        return { index: Number(index), uuid: uuid ?? '', name: name ?? '' };
      });
  } catch (error) {
    console.log(`nvidia-smi asked directly: ${(error as Error).message.split('\n')[0]}`);
    return [];
  }
}

/** PyTorch prints a UUID without nvidia-smi's "GPU-" prefix. */
const sameUuid = (a: string, b: string) => a.replace(/^GPU-/i, '').toLowerCase() === b.replace(/^GPU-/i, '').toLowerCase();

function spec(nodeId: string, shardId: string, gpuIndices: number[], env: Record<string, string> = {}): StartShard {
  return create(StartShardSchema, {
    replicaId: `replica/gpu-check/${shardId}`,
    shardId,
    deployment: 'gpu-check',
    rank: 0,
    nnodes: 1,
    gpuIndices,
    nodeId,
    profile: create(EngineProfileSchema, {
      name: 'gpu-probe',
      engine: Engine.FAKE,
      modelSource: 'llmgw/fake-demo',
      servedName: `gpu-check-${shardId}`,
      env: { ...env, LLMGW_GPU_PROBE: PROBE_PY },
    }),
  });
}

async function probeOf(stateDir: string, shardId: string, timeoutMs: number): Promise<Probe> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    let text = '';
    try {
      text = readFileSync(logPath(stateDir, shardId), 'utf8');
    } catch {
      // not written yet
    }
    const line = text.split('\n').find((l) => l.startsWith(PROBE_MARK));
    if (line) return JSON.parse(line.slice(PROBE_MARK.length)) as Probe;
    if (Date.now() > deadline) throw new Error(`no probe line in ${logPath(stateDir, shardId)} after ${timeoutMs / 1000} s:\n${text}`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

async function main(): Promise<void> {
  const nodeId = `gpu-check-${process.pid}`;
  const stateDir = mkdtempSync(join(tmpdir(), 'llmgw-gpu-check-'));
  const enginePorts = await findFreePort();
  const portRange = { from: enginePorts, to: enginePorts + 9 };
  // What engines need from this host (CUDA libraries), as an operator would pass with --pass-env.
  const passEnv = ['LD_LIBRARY_PATH', 'PYTHONPATH', 'CUDA_HOME'].filter((name) => process.env[name]);
  const truth = nvidiaSmiGpus();
  console.log(`nvidia-smi asked directly: ${truth.map((g) => `${g.index} ${g.name} ${g.uuid}`).join('; ') || 'no GPU'}`);

  try {
    // 1. The agent's supervisor starts the shards, with the environment every engine gets.
    const supervisor = createSupervisor({
      nodeId,
      stateDir,
      portRange,
      advertiseAddress: '127.0.0.1',
      engineContext: { fakeEngineCommand: ENGINE_COMMAND },
      passEnv,
      log: (line) => console.log(`  supervisor: ${line}`),
    });
    const shards = {
      gpu0: spec(nodeId, 'gpu0', [0]),
      none: spec(nodeId, 'none', []),
      sneaky: spec(nodeId, 'sneaky', [], { CUDA_VISIBLE_DEVICES: '0' }),
    };
    for (const s of Object.values(shards)) await supervisor.start(s);
    const probes: Record<keyof typeof shards, Probe> = {
      gpu0: await probeOf(stateDir, 'gpu0', 120_000),
      none: await probeOf(stateDir, 'none', 120_000),
      sneaky: await probeOf(stateDir, 'sneaky', 120_000),
    };
    supervisor.close();
    for (const [name, p] of Object.entries(probes)) console.log(`probe ${name}: ${JSON.stringify(p)}`);

    // 2. A real agent process: discovery through nvidia-smi, adoption of the three engines.
    const adminPort = await findFreePort();
    const unreachable = await findFreePort();
    const agent = spawn(
      process.execPath,
      [
        BIN,
        'agent',
        '--node-id',
        nodeId,
        '--state-dir',
        stateDir,
        '--gpus',
        'real',
        '--admin-addr',
        `127.0.0.1:${adminPort}`,
        '--port-range',
        `${portRange.from}-${portRange.to}`,
        '--insecure-unsigned',
      ],
      {
        env: { ...process.env, TEMPORAL_ADDRESS: `127.0.0.1:${unreachable}`, LLMGW_METRICS_ADDR: 'off' },
        stdio: ['ignore', 'pipe', 'pipe'],
      },
    );
    const agentLog: string[] = [];
    const keep = (chunk: Buffer) => agentLog.push(...chunk.toString('utf8').split('\n').filter(Boolean));
    agent.stdout.on('data', keep);
    agent.stderr.on('data', keep);
    // On TCP the admin API wants the token the agent keeps in its state dir.
    const tokenFile = join(stateDir, ADMIN_TOKEN_FILE);
    for (let attempt = 0; attempt < 60 && !existsSync(tokenFile); attempt++) await new Promise((r) => setTimeout(r, 250));
    const admin = connectAdmin(`127.0.0.1:${adminPort}`, { token: readTokenFile(tokenFile) });
    let described: Awaited<ReturnType<typeof admin.describe>> | undefined;
    for (let attempt = 0; attempt < 60 && !described; attempt++) {
      await new Promise((r) => setTimeout(r, 500));
      described = await admin.describe().catch(() => undefined);
    }
    admin.close();
    agent.kill('SIGTERM');
    console.log('agent log (first lines):');
    for (const line of agentLog.slice(0, 8)) console.log(`  ${line.slice(0, 240)}`);
    if (!described?.register) throw new Error('the agent did not answer Describe within 30 s');
    const reg = described.register;
    console.log(
      `agent Describe: gpu source ${reg.gpuSource}, class ${reg.gpuClass || 'none'}, problems: ${reg.problems.join('; ') || 'none'}`,
    );
    for (const g of reg.gpus) {
      console.log(
        `  GPU ${g.index} ${g.name} ${g.uuid} ${g.memoryTotalMib} MiB cc ${g.computeCapability} numa ${g.numaNode} pci ${g.pciBusId} ` +
          `driver ${g.driverVersion} cuda ${g.cudaVersion} health: ${g.health?.problems.join('; ') || 'ok'}`,
      );
    }
    for (const r of reg.runningShards) {
      console.log(`  shard ${r.spec?.shardId} gpus [${r.spec?.gpuIndices.join(',')}] adopted ${r.adopted}`);
    }

    console.log('\nchecks');
    verdict(
      truth.length > 0 &&
        truth.length === reg.gpus.length &&
        truth.every((t) => reg.gpus.some((g) => g.index === t.index && g.uuid === t.uuid)),
      `the agent's discovery matches nvidia-smi: ${reg.gpus.length} GPU(s) reported, ${truth.length} present`,
    );
    const gpu0 = truth.find((t) => t.index === 0);
    const { gpu0: given, none, sneaky } = probes;
    if (given.count === undefined) {
      // No PyTorch here: the environment the agent gave each engine is still checked.
      console.log(`  skip what CUDA lets each engine see: the probe could not ask (${given.error})`);
      verdict(given.cvd === '0', `shard given GPU 0 gets CUDA_VISIBLE_DEVICES=${given.cvd}`);
      verdict(none.cvd === '', `shard given no GPU gets CUDA_VISIBLE_DEVICES=${JSON.stringify(none.cvd)}`);
      verdict(sneaky.cvd === '', `profile setting CUDA_VISIBLE_DEVICES=0 without a GPU given gets ${JSON.stringify(sneaky.cvd)}`);
    } else {
      verdict(
        given.count === 1 && gpu0 !== undefined && sameUuid(given.uuids?.[0] ?? '', gpu0.uuid) && given.sum === 1 << 20,
        `shard given GPU 0 sees exactly it: CUDA_VISIBLE_DEVICES=${given.cvd}, ${given.count} device(s) ${given.uuids?.join(',')}, a kernel on it summed ${given.sum}`,
      );
      verdict(none.count === 0 && none.cvd === '', `shard given no GPU sees none: ${none.count} device(s)`);
      verdict(
        sneaky.count === 0 && sneaky.cvd === '',
        `profile setting CUDA_VISIBLE_DEVICES=0 without a GPU given sees none: ${sneaky.count} device(s)`,
      );
    }
    const adopted = reg.runningShards.filter((r) => r.adopted).map((r) => r.spec?.shardId);
    verdict(adopted.length === 3, `the agent process adopted the engines its supervisor started: ${adopted.join(', ')}`);
  } finally {
    killMarkedEngines([nodeId]);
    rmSync(stateDir, { recursive: true, force: true });
  }
  console.log(misses.length === 0 ? '\nall checks hold' : `\n${misses.length} check(s) missed`);
  process.exitCode = misses.length === 0 ? 0 : 1;
}

main().catch((error: unknown) => {
  console.error(`check:gpu-host failed: ${(error as Error).stack ?? String(error)}`);
  process.exit(1);
});
