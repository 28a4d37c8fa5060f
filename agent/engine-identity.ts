// Who engines run as, and the key they require: the agent keeps root for what needs it (GPUs,
// ports, other users' processes) and starts engines — third-party model code — as an unprivileged
// user (--engine-user), with an API key read from a host file (--engine-key-file), never through
// Temporal; with --engine-uid-range, each shard as a uid of its own (supervisor/start/engine-uid.ts).
// Agent side.
import { readFileSync } from 'node:fs';

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

export interface UidRange {
  from: number;
  to: number;
}

/**
 * The uids shards run as (--engine-uid-range), one each: undefined when the agent cannot switch
 * users (one warning) or runs engines as itself. Throws when the range cannot isolate: no engine
 * user to take the group from, or a uid of the range that already belongs to an account (an
 * engine given it would own that account's files).
 */
export function resolveEngineUids(
  range: UidRange | undefined,
  user: EngineUser | undefined,
  log: (line: string, level?: 'warn') => void,
  passwd = '/etc/passwd',
): UidRange | undefined {
  if (range === undefined) return undefined;
  const flag = `--engine-uid-range ${range.from}-${range.to}`;
  if ((process.getuid?.() ?? 0) !== 0) {
    log(`${flag}: this agent is not root, so it cannot give engines uids of their own; the flag is ignored`, 'warn');
    return undefined;
  }
  if (!user) throw new Error(`${flag}: engines would run as root here; give --engine-user, whose group the engines keep`);
  let text = '';
  try {
    text = readFileSync(passwd, 'utf8');
  } catch {
    // No passwd file: no account to collide with.
  }
  for (const line of text.split('\n')) {
    const [name, , uid] = line.split(':');
    const n = Number(uid);
    if (name && uid !== undefined && uid !== '' && n >= range.from && n <= range.to)
      throw new Error(`${flag}: uid ${n} is the account ${name}'s; give a range no account uses`);
  }
  return range;
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
