// The command line for a llama.cpp shard: `llama-server` on the GGUF file of the model's local
// weights, serving the OpenAI API on the shard's port. Agent side; pure but for finding the one
// .gguf in the weights folder.
import { readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { localModelPath } from '../weights/cache-layout.js';
import { LLAMA_SERVER_MISSING } from './llamacpp-binary.js';
import { engineEnv } from './env.js';
import { invalidSpec, leaderHttpPort, type ShardPlan } from './plan.js';
import type { EngineContext, EngineLaunch } from './types.js';

// llama-server answers 503 {"error":{"message":"Loading model"}} here until the model is in
// memory, then 200 {"status":"ok"}.
const HEALTH_PATH = '/health';

/**
 * The GGUF to load: the source itself when it names a .gguf file, else the one .gguf in its
 * folder. Split models (name-00001-of-00003.gguf) load from their first part, as llama.cpp does.
 */
export function ggufOf(path: string): string | { problem: string } {
  let stat;
  try {
    stat = statSync(path);
  } catch {
    return { problem: `${path} does not exist on this host` };
  }
  if (stat.isFile()) return path.endsWith('.gguf') ? path : { problem: `${path} is not a .gguf file` };
  const ggufs = readdirSync(path)
    .filter((name) => name.endsWith('.gguf'))
    .filter((name) => !/-0000[2-9]-of-|-000[1-9]\d-of-/.test(name))
    .sort();
  if (ggufs.length === 1) return join(path, ggufs[0]!);
  if (ggufs.length === 0)
    return { problem: `${path} holds no .gguf file (llama.cpp loads GGUF only; convert the model or pick a GGUF repository)` };
  return { problem: `${path} holds ${ggufs.length} GGUF files (${ggufs.join(', ')}): name one in the source (file:///DIR/NAME.gguf)` };
}

/** Threads for the engine: its share of the host's cores, as many as its share of the GPUs. */
export function llamaThreads(plan: ShardPlan, ctx: EngineContext): number {
  const cpus = ctx.hostCpus ?? 1;
  const hostGpus = Math.max(1, ctx.hostGpus ?? 1);
  const gpus = Math.max(1, plan.spec.gpuIndices.length);
  return Math.max(1, Math.floor((cpus * Math.min(gpus, hostGpus)) / hostGpus));
}

export function llamacppLaunch(plan: ShardPlan, ctx: EngineContext): EngineLaunch {
  const { profile, spec } = plan;
  if (plan.nnodes > 1) throw invalidSpec(spec, `profile ${profile.name}: llama.cpp runs on one node, not ${plan.nnodes}`);
  if (!ctx.llamaServerCommand) throw invalidSpec(spec, `this host has ${LLAMA_SERVER_MISSING}`);
  // llama-server takes --ssl-cert-file only when built with LLAMA_OPENSSL, and the one the agent
  // builds (llamacpp-binary.ts) is not: refusing is better than serving plain HTTP unannounced.
  if (ctx.tls)
    throw invalidSpec(
      spec,
      `profile ${profile.name}: this agent runs engines with TLS (--engine-tls), and llama-server here is built without SSL; run llama.cpp profiles on agents without --engine-tls`,
    );
  const local = localModelPath(profile.modelSource, ctx.weightsDir);
  if (local === undefined)
    throw invalidSpec(
      spec,
      `profile ${profile.name}: llama.cpp needs local GGUF weights (an hf://, s3:// or file:// source), not ${profile.modelSource}`,
    );
  const gguf = ggufOf(local);
  if (typeof gguf !== 'string') throw invalidSpec(spec, `profile ${profile.name}: ${gguf.problem}`);
  const argv = [
    ...ctx.llamaServerCommand,
    '--model',
    gguf,
    '--alias',
    profile.servedName,
    '--host',
    ctx.advertiseAddress,
    '--port',
    String(leaderHttpPort(plan)),
    // The router's load signals and the autoscaler read these (router/scraper.ts).
    '--metrics',
    // /slots shows what each slot holds; the agent's adoption reads nothing else from it.
    '--slots',
    '--threads',
    String(llamaThreads(plan, ctx)),
    // Every layer on the GPUs the shard was given, when this build has a GPU backend.
    ...(ctx.llamaServerGpu && spec.gpuIndices.length > 0 ? ['--n-gpu-layers', '999'] : []),
    // The CPU backend's repacked weights (llama-cpp-python 0.3.36's llama.cpp) take its AMX
    // kernels on a CPU that reports AMX, and those die (a general protection fault in
    // ggml_gemm_q8_0_4x8_q8_0 at the warm-up) in a VM that does not grant the tile state, as
    // this project's machines do not. Off by default; a profile may pass --repack back.
    ...(ctx.llamaServerGpu ? [] : ['--no-repack']),
    // The profile's args come last: llama.cpp keeps the last value of a repeated flag, so a
    // catalog entry can set --parallel, --ctx-size or --threads itself.
    ...profile.args,
  ];
  return {
    processes: [{ role: 'engine', argv, env: engineEnv(spec, ctx), blocking: true }],
    servesHttp: true,
    healthPath: HEALTH_PATH,
  };
}
