// Who may use the agent's admin API (it shows every engine's log, which can hold whatever an
// engine printed). Agent side, with the client's half. Two ways, chosen by --admin-addr:
// a Unix socket (the default, `<state dir>/admin.sock`, mode 0600 in the 0700 state dir: only
// the agent's user can connect), or TCP, where every call must carry the token kept in
// `<state dir>/admin.token` (0600) — loopback alone would let any local user in.
import { randomBytes, timingSafeEqual } from 'node:crypto';
import { chmodSync, existsSync, lstatSync, mkdirSync, readFileSync, unlinkSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { Metadata } from '@grpc/grpc-js';

export const ADMIN_SOCKET = 'admin.sock';
export const ADMIN_TOKEN_FILE = 'admin.token';

export function isUnixAddress(address: string): boolean {
  return address.startsWith('unix:');
}

/** `unix` (the default) → `unix:<stateDir>/admin.sock`; anything else as given. */
export function resolveAdminAddress(flag: string, stateDir: string): string {
  return flag === 'unix' ? `unix:${join(stateDir, ADMIN_SOCKET)}` : flag;
}

/** Before binding a Unix socket: its directory exists (0700), and a socket left by a dead agent is removed. */
export function prepareSocketPath(address: string): string {
  const path = address.slice('unix:'.length);
  mkdirSync(dirname(path), { recursive: true, mode: 0o700 });
  if (existsSync(path)) {
    if (!lstatSync(path).isSocket()) throw new Error(`admin API cannot listen on ${address}: ${path} exists and is not a socket`);
    unlinkSync(path);
  }
  return path;
}

/** After binding: only the agent's user may connect. */
export function restrictSocket(path: string): void {
  chmodSync(path, 0o600);
}

/** The TCP listener's token: read from the state dir, or made there (0600) on first start. */
export function adminToken(stateDir: string): string {
  const file = join(stateDir, ADMIN_TOKEN_FILE);
  if (existsSync(file)) {
    chmodSync(file, 0o600);
    const token = readFileSync(file, 'utf8').trim();
    if (token.length >= 32) return token;
  }
  mkdirSync(stateDir, { recursive: true, mode: 0o700 });
  const token = randomBytes(32).toString('hex');
  writeFileSync(file, `${token}\n`, { mode: 0o600 });
  chmodSync(file, 0o600);
  return token;
}

/** True when `metadata` carries `authorization: Bearer <token>` (compared in constant time). */
export function authorized(metadata: Metadata, token: string | undefined): boolean {
  if (token === undefined) return true;
  const header = metadata.get('authorization')[0];
  const given = Buffer.from(typeof header === 'string' ? header : '');
  const wanted = Buffer.from(`Bearer ${token}`);
  return given.length === wanted.length && timingSafeEqual(given, wanted);
}

/** The client's half: metadata carrying the token, or none for a Unix socket. */
export function tokenMetadata(token: string | undefined): Metadata {
  const metadata = new Metadata();
  if (token !== undefined) metadata.set('authorization', `Bearer ${token}`);
  return metadata;
}

/** A token file as the CLI reads it: the first line, trimmed. */
export function readTokenFile(file: string): string {
  return readFileSync(file, 'utf8').split('\n')[0]?.trim() ?? '';
}
