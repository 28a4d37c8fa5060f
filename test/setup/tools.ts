// What the test suite needs beyond npm's packages, pinned in this one place: the Python venvs,
// the programs llmgw builds once per machine, and what only root can install. The global setup
// installs them (test/setup/install-tools.ts); tests find them here.
import { join } from 'node:path';
import { venvDir, type PythonVenv } from '../../common/python-venv.js';

export const PYTHON_TOOLS = {
  /** The official huggingface_hub client: the judge of the stand-in hub and the weights cache. */
  hf: { name: 'hf', packages: ['huggingface_hub==0.36.0'] },
  /** moto's S3 server: the real S3-speaking store of the S3 weights tests. */
  moto: { name: 'moto', packages: ['moto[server]==5.2.5'] },
  /** Ray, for the Ray launcher's tests (ray.test.ts, net-ray.test.ts). */
  ray: { name: 'ray', packages: ['ray==2.60.0'] },
  /** OpenAI's official Python client: what users send through the router (llamacpp.test.ts). */
  openai: { name: 'openai', packages: ['openai==2.8.0'] },
} as const satisfies Record<string, PythonVenv>;

export type PythonTool = keyof typeof PYTHON_TOOLS;

/** A program in a tool's venv: toolProgram('ray', 'ray'), toolProgram('hf', 'python'). */
export function toolProgram(tool: PythonTool, program: string): string {
  return join(venvDir(PYTHON_TOOLS[tool]), 'bin', program);
}

/** Debian packages only root can install, the command each provides, and which tests use it. */
export const ROOT_PACKAGES = [
  { pkg: 'nftables', command: 'nft', usedBy: 'the network tests (test/e2e/net-*.test.ts) cut links with it' },
  { pkg: 'chromium', command: 'chromium', usedBy: 'net-hosts.test.ts reads the Temporal Web UI in it' },
] as const;

/** The `ray` the Ray tests run: LLMGW_RAY_COMMAND, or the one the test setup installed. */
export function rayCommand(): string {
  return process.env.LLMGW_RAY_COMMAND || toolProgram('ray', 'ray');
}
