// The official Python huggingface_hub client, from the venv the test setup installs (test/setup/tools.ts):
// the judge of whether the stand-in hub speaks the hub's protocol and whether the agent's
// cache is one the engines (which read it with huggingface_hub) accept.
import { existsSync } from 'node:fs';
import { toolProgram } from '../setup/tools.js';
import { pythonJson } from './python-json.js';

const PYTHON = toolProgram('hf', 'python');

export function hfPythonMissing(): string | undefined {
  return existsSync(PYTHON)
    ? undefined
    : `${PYTHON} is missing: npm test installs it in its global setup (test/setup/install-tools.ts); run the tests through npm test or vitest, not a bare file`;
}

/** Runs a Python snippet with huggingface_hub; its last stdout line is parsed as JSON. */
export function runHfPython<T>(code: string, env: Record<string, string>, timeoutMs = 120_000): Promise<T> {
  return pythonJson<T>(PYTHON, code, { HF_HUB_DISABLE_TELEMETRY: '1', ...env }, timeoutMs);
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
