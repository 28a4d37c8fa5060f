// `llmgw fake-engine --help`: what each flag the fake engine reads does. Typed against the flag
// tables in options.ts, so that a flag added there without a line here fails to compile.
import type { FakeEngineFlag } from './options.js';

const FLAG_HELP: Record<FakeEngineFlag, string> = {
  '--port': 'HTTP port (required on rank 0)',
  '--host': 'listen address (default 127.0.0.1)',
  '--model': 'the model it pretends to serve (default fake-model; also `serve MODEL`)',
  '--model-path': 'as --model (SGLang spelling)',
  '--served-model-name': 'names clients may use (several allowed; default the model)',
  '--load-time': 'seconds before /health answers 200',
  '--weights': 'a weights directory to check and "load" (its size adds to the load time)',
  '--weights-load-rate': 'bytes per second the weights load at',
  '--tokens-per-second': 'decode speed per request (0: as fast as possible)',
  '--max-concurrency': 'requests served at once; the rest wait (default 256)',
  '--prefill-tokens-per-second': 'prompt tokens prefilled per second (0: instantly)',
  '--prefix-cache-blocks': 'prefix cache capacity in blocks (0: no cache)',
  '--block-size': 'tokens per cache block (default 16)',
  '--embedding-dim': 'length of /v1/embeddings vectors (default 16)',
  '--max-model-len': 'longest prompt + completion in tokens (default 32768)',
  '--kv-events-config': "vLLM's JSON KV-cache events config: publish the prefix cache's events",
  '--enable-lora': 'accept LoRA adapters (/v1/load_lora_adapter)',
  '--max-loras': 'adapters loaded at once',
  '--max-lora-rank': 'the highest adapter rank accepted',
  '--lora-load-time': 'seconds an adapter takes to load',
  '--api-key': '/v1/* requires `Authorization: Bearer KEY` (or VLLM_API_KEY)',
  '--ssl-certfile': 'serve HTTPS with this PEM certificate (with --ssl-keyfile), as vLLM does',
  '--ssl-keyfile': "the certificate's PEM private key",
  '--enable-sleep-mode': 'serve /sleep, /wake_up, /is_sleeping (with VLLM_SERVER_DEV_MODE=1), as vLLM does',
  '--wake-seconds': 'seconds a wake takes (default 0.5; level 2 adds the load time)',
  '--gpu-memory-utilization': "share of each simulated GPU it takes (default 0.9), accounted on its agent's ledger",
  '--weights-mib': 'MiB of that share that are weights (level 1 keeps them in host RAM; default half)',
  '--crash-after': 'exit with an error after this many seconds',
  '--unhealthy-after': '/health answers 503 after this many seconds',
  '--hang': 'never become healthy',
  '--fail-start': 'exit at once, as an engine that cannot load its model',
  '--print-env': 'NAME[,NAME…]: print these variables first',
  '--nnodes': 'ranks of a multi-node engine (default 1)',
  '--node-rank': "this process's rank (default 0)",
  '--leader': 'HOST:PORT rank 0 listens on for the other ranks',
  '--dist-init-addr': 'as --leader (SGLang spelling)',
};

/** The flags, for the end of the command's help. */
export function fakeEngineFlagsHelp(): string {
  const width = Math.max(...Object.keys(FLAG_HELP).map((flag) => flag.length));
  const lines = Object.entries(FLAG_HELP).map(([flag, help]) => `  ${flag.padEnd(width)}  ${help}`);
  return [
    '',
    'It takes a vLLM-style argv ([serve MODEL] --port PORT ...); flags vLLM or SGLang take that it',
    'does not use are skipped. Flags (--flag VALUE or --flag=VALUE):',
    ...lines,
  ].join('\n');
}
