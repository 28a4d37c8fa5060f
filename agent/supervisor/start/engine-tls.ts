// The certificate an engine serves HTTPS with (--engine-tls): issued by the agent for each shard
// start, for its advertised address, and kept for that shard's restarts (same port, same pin, so
// its signed route still holds). The key is written 0600 for the engine's user alone and goes
// nowhere else: not into the spec record, a log line or any report; only the certificate's
// fingerprint does (the record, the endpoint attestation). Agent side.
import { X509Certificate, createHash } from 'node:crypto';
import {
  chmodSync,
  chownSync,
  existsSync,
  closeSync,
  fsyncSync,
  mkdirSync,
  openSync,
  readFileSync,
  renameSync,
  rmSync,
  writeSync,
} from 'node:fs';
import { join } from 'node:path';
import { issueEngineCertificate } from '../../../common/self-signed-cert.js';
import type { EngineUser } from '../../engine-identity.js';
import type { EngineTlsFiles } from '../../engines/index.js';

/** <stateDir>/engine-tls: passable (0711) but not listable, so an engine reaches only its own files. */
export function engineTlsDir(stateDir: string): string {
  return join(stateDir, 'engine-tls');
}

export function engineTlsFiles(stateDir: string, shardId: string): EngineTlsFiles {
  const dir = engineTlsDir(stateDir);
  return { certFile: join(dir, `${shardId}.crt`), keyFile: join(dir, `${shardId}.key`) };
}

function writeAtomic(file: string, text: string, mode: number, user: EngineUser | undefined): void {
  const tmp = `${file}.tmp-${process.pid}`;
  const fd = openSync(tmp, 'w', mode);
  try {
    if (user) chownSync(tmp, user.uid, user.gid);
    writeSync(fd, text);
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
  renameSync(tmp, file);
}

/** The pin of the certificate in `certFile`, or undefined when there is none to read. */
function fingerprintOf(certFile: string): string | undefined {
  try {
    return createHash('sha256')
      .update(new X509Certificate(readFileSync(certFile)).raw)
      .digest('hex');
  } catch {
    return undefined;
  }
}

/**
 * The shard's certificate files and their pin: the ones `kept` names when they are still there
 * (a restart of the same shard), else a new pair issued for `address` (a new start, or files
 * gone). The key is 0600 and owned by the engine's user when it runs as another one.
 */
export function shardCertificate(
  stateDir: string,
  shardId: string,
  address: string,
  user: EngineUser | undefined,
  kept: string | undefined,
): { files: EngineTlsFiles; fingerprint: string } {
  const files = engineTlsFiles(stateDir, shardId);
  if (kept !== undefined && fingerprintOf(files.certFile) === kept && existsSync(files.keyFile)) {
    // The engine's user may have changed (a uid range given since): the key must stay its alone.
    if (user) chownSync(files.keyFile, user.uid, user.gid);
    return { files, fingerprint: kept };
  }
  const dir = engineTlsDir(stateDir);
  mkdirSync(dir, { recursive: true, mode: 0o711 });
  chmodSync(dir, 0o711);
  const issued = issueEngineCertificate(address);
  writeAtomic(files.keyFile, issued.keyPem, 0o600, user);
  writeAtomic(files.certFile, issued.certPem, 0o644, undefined);
  return { files, fingerprint: issued.fingerprint };
}

export function removeEngineTls(stateDir: string, shardId: string): void {
  const files = engineTlsFiles(stateDir, shardId);
  // The certificate first: one left without its key would be kept by the next start, which then fails.
  rmSync(files.certFile, { force: true });
  rmSync(files.keyFile, { force: true });
}
