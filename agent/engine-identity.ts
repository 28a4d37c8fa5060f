// Who engines run as, and the key they require: the agent keeps root for what needs it (GPUs,
// ports, other users' processes) and starts engines — third-party model code — as an unprivileged
// user (--engine-user), with an API key read from a host file (--engine-key-file), never through
// Temporal. Agent side.
import { readFileSync } from 'node:fs';
import { Engine } from '../proto/gen/llmgw/v1/shard_pb.js';

export interface EngineUser {
  name: string;
  uid: number;
  gid: number;
  home: string;
}

/** Users tried, in order, when --engine-user is not given. */
export const DEFAULT_ENGINE_USERS = ['llmgw-engine', 'nobody'];

/** One /etc/passwd entry by name or uid (own parsing: Node has no getpwnam). */
export function lookupUser(nameOrUid: string, passwd = '/etc/passwd'): EngineUser | undefined {
  let text: string;
  try {
    text = readFileSync(passwd, 'utf8');
  } catch {
    return undefined;
  }
  for (const line of text.split('\n')) {
    const [name, , uid, gid, , home] = line.split(':');
    if (name === undefined || uid === undefined || gid === undefined) continue;
    if (name === nameOrUid || uid === nameOrUid) return { name, uid: Number(uid), gid: Number(gid), home: home || '/' };
  }
  return undefined;
}

/**
 * The user engines run as: undefined when they run as the agent itself (an agent that is not
 * root cannot switch, and `--engine-user root` asks for the old behaviour). Throws for a user
 * that does not exist.
 */
export function resolveEngineUser(flag: string | undefined, log: (line: string, level?: 'warn') => void): EngineUser | undefined {
  const agentUid = process.getuid?.() ?? 0;
  if (agentUid !== 0) {
    if (flag !== undefined && flag !== 'root')
      log(`--engine-user ${flag}: this agent is not root, so engines run as its own user (uid ${agentUid})`, 'warn');
    return undefined;
  }
  if (flag === 'root') {
    log('--engine-user root: engines (third-party model code) run as root on this host', 'warn');
    return undefined;
  }
  if (flag !== undefined) {
    const user = lookupUser(flag);
    if (!user) throw new Error(`--engine-user ${flag}: no such user on this host (create one, e.g. \`useradd --system llmgw-engine\`)`);
    if (user.uid === 0) throw new Error(`--engine-user ${flag} is root: give an unprivileged user, or --engine-user root to mean it`);
    return user;
  }
  for (const name of DEFAULT_ENGINE_USERS) {
    const user = lookupUser(name);
    if (user && user.uid !== 0) return user;
  }
  log(`no ${DEFAULT_ENGINE_USERS.join(' or ')} user on this host: engines run as root (give one with --engine-user)`, 'warn');
  return undefined;
}

/** The engine key from its file (first non-blank line), read at every spawn so a rotation needs no restart. */
export function readEngineKey(file: string): string {
  const key = readFileSync(file, 'utf8')
    .split('\n')
    .map((line) => line.trim())
    .find((line) => line !== '' && !line.startsWith('#'));
  if (!key) throw new Error(`the engine key file ${file} holds no key`);
  return key;
}

/**
 * How an engine is given its key: vLLM and the fake engine read VLLM_API_KEY (the environment is
 * readable only by the engine's user and root, unlike the command line); SGLang takes --api-key.
 */
export function engineKeyArgs(engine: Engine | undefined, key: string): { env: Record<string, string>; args: string[] } {
  if (engine === Engine.SGLANG) return { env: {}, args: ['--api-key', key] };
  return { env: { VLLM_API_KEY: key }, args: [] };
}
