// The official Python huggingface_hub client, from the venv .ci/run sets up (.llmgw/hf-venv):
// the judge of whether the stand-in hub speaks the hub's protocol and whether the agent's
// cache is one the engines (which read it with huggingface_hub) accept.
import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';

export const HF_VENV = join(__dirname, '../../.llmgw/hf-venv');
const PYTHON = join(HF_VENV, 'bin/python');

export function hfPythonMissing(): string | undefined {
  return existsSync(PYTHON)
    ? undefined
    : `${PYTHON} is missing: python3 -m venv .llmgw/hf-venv && .llmgw/hf-venv/bin/pip install huggingface_hub==0.36.0 (see .ci/run)`;
}

/** Runs a Python snippet with huggingface_hub; its last stdout line is parsed as JSON. */
export function runHfPython<T>(code: string, env: Record<string, string>, timeoutMs = 120_000): Promise<T> {
  return new Promise((resolve, reject) => {
    execFile(
      PYTHON,
      ['-c', code],
      {
        env: { PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? '/tmp', HF_HUB_DISABLE_TELEMETRY: '1', ...env },
        timeout: timeoutMs,
        maxBuffer: 16 * 1024 * 1024,
      },
      (error, stdout, stderr) => {
        if (error) return reject(new Error(`python failed: ${error.message}\n${stderr.slice(-3000)}`));
        const lines = stdout.trim().split('\n');
        try {
          resolve(JSON.parse(lines[lines.length - 1] ?? '') as T);
        } catch {
          reject(new Error(`python printed no JSON: ${stdout.slice(-2000)}\n${stderr.slice(-2000)}`));
        }
      },
    );
  });
}

/** Python that hashes every file of a snapshot directory: {relative path: sha256}. */
export const HASH_SNAPSHOT = `
import hashlib, json, os
def hash_tree(root):
    out = {}
    for dirpath, _, files in os.walk(root):
        for name in files:
            path = os.path.join(dirpath, name)
            h = hashlib.sha256()
            with open(path, 'rb') as f:
                for chunk in iter(lambda: f.read(1 << 20), b''):
                    h.update(chunk)
            out[os.path.relpath(path, root)] = h.hexdigest()
    return out
`;
