// Whether this host's Ray has the Ray Client, asked once before the first Ray head starts. Agent
// side; the supervisor calls it (options.rayHasClient) to pin the client's port in the head's block.
//
// `ray start --head` starts the Ray Client server on 0.0.0.0:10001 whenever the client's
// dependencies are installed (ray[client], ray[default], most vLLM images): anyone who reaches it
// runs code on the cluster. Its port can be pinned (and then guarded) with --ray-client-server-port,
// but a Ray without the client refuses that flag, so the agent asks Ray itself: given a port Ray
// must refuse, it says either that the client is missing or that the port is out of range, before
// it starts anything. (--block keeps anything a future Ray might start in the probe's own process
// group, which is ended with the probe.)
import { spawn } from 'node:child_process';

const PROBE_TIMEOUT_MS = 30_000;
const HAS_CLIENT = /ray_client_server_port must be/;
const NO_CLIENT = /ray\[client\]/;

export type RayClientAnswer = 'client' | 'no-client' | 'unknown';

/** Reads the probe's output: Ray checks the client's dependencies first, then the port's range. */
export function readRayClientProbe(output: string): RayClientAnswer {
  if (NO_CLIENT.test(output)) return 'no-client';
  if (HAS_CLIENT.test(output)) return 'client';
  return 'unknown';
}

/** The probe's arguments after the ray command: port 1 is below every range Ray accepts. */
export function rayClientProbeArgs(): string[] {
  return ['start', '--head', '--ray-client-server-port', '1', '--block'];
}

function runProbe(command: string[]): Promise<string> {
  return new Promise((resolve) => {
    const [program, ...args] = [...command, ...rayClientProbeArgs()];
    const child = spawn(program!, args, {
      detached: true,
      stdio: ['ignore', 'pipe', 'pipe'],
      env: { ...process.env, RAY_USAGE_STATS_ENABLED: '0' },
    });
    let output = '';
    const collect = (chunk: Buffer): void => void (output = (output + chunk.toString('utf8')).slice(-64_000));
    child.stdout.on('data', collect);
    child.stderr.on('data', collect);
    const killGroup = (): void => {
      try {
        if (child.pid !== undefined) process.kill(-child.pid, 'SIGKILL');
      } catch {
        // Already gone.
      }
    };
    const timer = setTimeout(killGroup, PROBE_TIMEOUT_MS);
    child.on('error', (error) => {
      clearTimeout(timer);
      resolve(`${output}\n${String(error)}`);
    });
    child.on('close', () => {
      clearTimeout(timer);
      killGroup();
      resolve(output);
    });
  });
}

/** Asks once, on first use; `unknown` reads as no client, with a warning that says what that risks. */
export function createRayClientProbe(rayCommand: string[], log: (line: string, level?: 'warn') => void): () => Promise<boolean> {
  let answer: Promise<boolean> | undefined;
  return () => {
    answer ??= runProbe(rayCommand).then((output) => {
      const read = readRayClientProbe(output);
      if (read === 'unknown') {
        log(
          `could not tell whether ${rayCommand.join(' ')} has the Ray Client; if it has, a Ray head listens on port 10001 unguarded: ${output.trim().split('\n').at(-1) ?? ''}`,
          'warn',
        );
      }
      return read === 'client';
    });
    return answer;
  };
}
