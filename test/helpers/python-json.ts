// Runs a Python snippet under the interpreter a test tool installed, and reads its answer: the last
// line it prints, as JSON. The stand-in hub and the S3 stand-in are both driven this way.
import { execFile } from 'node:child_process';

/** Runs `code` with `python -c` and only PATH, HOME and `env` set; rejects with its stderr when it fails. */
export function pythonJson<T>(python: string, code: string, env: Record<string, string>, timeoutMs = 120_000): Promise<T> {
  return new Promise((resolve, reject) => {
    execFile(
      python,
      ['-c', code],
      { env: { PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? '/tmp', ...env }, timeout: timeoutMs, maxBuffer: 16 * 1024 * 1024 },
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
