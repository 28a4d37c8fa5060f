// What `llmgw up` deploys: the fake engine's `demo` (the fast default), or with --real the
// catalog's `gemma-3-270m` on llama.cpp, whose engine and model are installed first, once per
// machine. Each with the curl its banner prints, sent as printed.
import { ensureLlamaServer } from '../../agent/engines/llamacpp-binary.js';
import { ensureGemmaModel } from '../../common/gemma-gguf.js';

export interface UpModel {
  model: string;
  replicas: number;
  /** Installs what the model needs on this machine (a build the first time: minutes). */
  prepare(say: (line: string) => void): Promise<void>;
  curl(routerPort: number): string;
}

export function upModel(real: boolean, replicas: string | undefined): UpModel {
  const count = (fallback: number): number => {
    const n = Number(replicas ?? fallback);
    if (!Number.isInteger(n) || n < 1 || n > 16) throw new Error(`--replicas ${replicas}: use 1-16`);
    return n;
  };
  if (!real)
    return {
      model: 'demo',
      replicas: count(2),
      prepare: async () => undefined,
      curl: (port) => `curl http://127.0.0.1:${port}/v1/chat/completions -H 'content-type: application/json' \\
    -d '{"model":"demo","messages":[{"role":"user","content":"Hello!"}]}'`,
    };
  return {
    model: 'gemma-3-270m',
    // One llama.cpp replica per two cores is what a small machine carries beside the stack.
    replicas: count(1),
    prepare: async (say) => {
      say(`llama-server: ${await ensureLlamaServer(say)}`);
      say(`gemma-3-270m: ${await ensureGemmaModel(say)}`);
    },
    // Gemma 3 270M is a base model: a completion is the fair probe, as docs/engines.md says.
    curl: (port) => `curl http://127.0.0.1:${port}/v1/completions -H 'content-type: application/json' \\
    -d '{"model":"gemma-3-270m","prompt":"The Eiffel Tower is located in the city of","max_tokens":12,"temperature":0}'`,
  };
}
