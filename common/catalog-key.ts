// The control plane's signing keys: the control worker signs every revision it resolves, every
// placement ticket and every route with a private Ed25519 key; agents and routers verify with
// public keys only, so what one GPU host holds cannot sign for the others (docs/security.md).
// Process side. One key a line; the first that can sign signs, all verify (rotation).
import { createHash, createPrivateKey, createPublicKey, generateKeyPairSync, type KeyObject } from 'node:crypto';
import { closeSync, mkdirSync, openSync, readFileSync, statSync, writeSync } from 'node:fs';
import { dirname } from 'node:path';

/**
 * `ed25519` keys carry a public key (every verifier) and, in the control worker's file only, the
 * private key. `hmac` is the shared secret of earlier releases: it both signs and verifies, and
 * is accepted only during the move to Ed25519 (the key-file lines of the migration window).
 */
export type CatalogKey =
  { kind: 'ed25519'; id: string; publicKey: KeyObject; privateKey?: KeyObject } | { kind: 'hmac'; id: string; secret: Buffer };

export interface CatalogKeyring {
  file: string;
  /** The key new signatures are made with: the file's first that can sign (undefined: a verifier's file). */
  signing: CatalogKey | undefined;
  /** Every key in the file, the signing one included. */
  all: CatalogKey[];
}

/** The shortest legacy HMAC key accepted: 32 characters. */
export const MIN_KEY_LENGTH = 32;

const PRIVATE_PREFIX = 'ed25519-private:';
const PUBLIC_PREFIX = 'ed25519-public:';
const HMAC_PREFIX = 'hmac:';
// DER framings of a raw 32-byte Ed25519 key (RFC 8410): node:crypto takes keys as DER or PEM.
const PKCS8_ED25519 = Buffer.from('302e020100300506032b657004220420', 'hex');
const SPKI_ED25519 = Buffer.from('302a300506032b6570032100', 'hex');

export function keyId(secret: Buffer): string {
  return createHash('sha256').update('llmgw catalog key id\n').update(secret).digest('hex').slice(0, 12);
}

function rawPublic(publicKey: KeyObject): Buffer {
  return publicKey.export({ format: 'der', type: 'spki' }).subarray(SPKI_ED25519.length);
}

function ed25519Key(raw: Buffer, isPrivate: boolean): CatalogKey {
  if (raw.length !== 32) throw new Error('an Ed25519 key is 32 bytes');
  if (isPrivate) {
    const privateKey = createPrivateKey({ key: Buffer.concat([PKCS8_ED25519, raw]), format: 'der', type: 'pkcs8' });
    const publicKey = createPublicKey(privateKey);
    return { kind: 'ed25519', id: keyId(rawPublic(publicKey)), publicKey, privateKey };
  }
  const publicKey = createPublicKey({ key: Buffer.concat([SPKI_ED25519, raw]), format: 'der', type: 'spki' });
  return { kind: 'ed25519', id: keyId(raw), publicKey };
}

/** One key line (`ed25519-private:`, `ed25519-public:` or a legacy secret); `where` names it in errors. */
export function parseKeyLine(line: string, where: string): CatalogKey {
  const ed = line.startsWith(PRIVATE_PREFIX) ? PRIVATE_PREFIX : line.startsWith(PUBLIC_PREFIX) ? PUBLIC_PREFIX : undefined;
  if (ed !== undefined) {
    try {
      return ed25519Key(Buffer.from(line.slice(ed.length).trim(), 'base64url'), ed === PRIVATE_PREFIX);
    } catch {
      throw new Error(`the ${ed.slice(0, -1)} key on ${where} is not a base64url Ed25519 key of 32 bytes`);
    }
  }
  const secret = line.startsWith(HMAC_PREFIX) ? line.slice(HMAC_PREFIX.length).trim() : line;
  if (secret.length < MIN_KEY_LENGTH) {
    throw new Error(
      `the catalog key on ${where} is shorter than ${MIN_KEY_LENGTH} characters: make a key pair with \`llmgw keygen\` (or, for the legacy shared key, a random one such as \`openssl rand -hex 32\`)`,
    );
  }
  const bytes = Buffer.from(secret, 'utf8');
  return { kind: 'hmac', id: keyId(bytes), secret: bytes };
}

/** Reads and checks the key file; every problem names the file and the line, never a key. */
export function readCatalogKeys(file: string): CatalogKeyring {
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (error) {
    throw new Error(`cannot read the catalog key file ${file}: ${(error as NodeJS.ErrnoException).code ?? String(error)}`, {
      cause: error,
    });
  }
  const keys: CatalogKey[] = [];
  text.split('\n').forEach((raw, index) => {
    const line = raw.trim();
    if (line === '' || line.startsWith('#')) return;
    keys.push(parseKeyLine(line, `line ${index + 1} of ${file}`));
  });
  if (keys.length === 0) throw new Error(`the catalog key file ${file} holds no key (one key a line; the first that can sign signs)`);
  return { file, signing: keys.find(canSign), all: keys };
}

export function canSign(key: CatalogKey): boolean {
  return key.kind === 'hmac' || key.privateKey !== undefined;
}

/**
 * The keys of an agent or a router: public keys, and during the migration window the legacy
 * HMAC keys. A private Ed25519 key there is refused: whoever takes that host could sign for the
 * fleet, which is what public keys are for.
 */
export function readVerifyingKeys(file: string): CatalogKeyring {
  const ring = readCatalogKeys(file);
  if (ring.all.some((key) => key.kind === 'ed25519' && key.privateKey !== undefined)) {
    throw new Error(
      `the catalog key file ${file} holds a private Ed25519 key: agents and routers hold public keys only. Give them the public file (\`llmgw keygen\` writes it next to the private one, as .pub)`,
    );
  }
  return { ...ring, signing: undefined };
}

/** Whether a verifier's file still accepts the legacy shared key (the migration window is open). */
export function legacyKeys(ring: CatalogKeyring): string[] {
  return ring.all.filter((key) => key.kind === 'hmac').map((key) => key.id);
}

/** What is wrong with how the file is kept (a signing key readable by others is anyone's to sign with). */
export function keyFileWarnings(file: string): string[] {
  try {
    const mode = statSync(file).mode & 0o777;
    if (mode & 0o077) return [`the catalog key file ${file} is readable by others (mode ${mode.toString(8)}): chmod 600 it`];
  } catch {
    // Unreadable files are reported by readCatalogKeys.
  }
  return [];
}

/** The public line of a private key line's key: what agents and routers are given. */
export function publicLine(key: CatalogKey): string {
  if (key.kind !== 'ed25519') throw new Error('only Ed25519 keys have a public half');
  return `${PUBLIC_PREFIX}${rawPublic(key.publicKey).toString('base64url')}`;
}

/** A fresh key pair as the two files' lines. */
export function newKeyPairLines(): { privateLine: string; publicLine: string } {
  const { privateKey } = generateKeyPairSync('ed25519');
  const seed = privateKey.export({ format: 'der', type: 'pkcs8' }).subarray(PKCS8_ED25519.length);
  const line = `${PRIVATE_PREFIX}${seed.toString('base64url')}`;
  return { privateLine: line, publicLine: publicLine(parseKeyLine(line, 'a new key')) };
}

/** The file agents and routers get next to the control worker's private key file. */
export function publicKeyFileOf(file: string): string {
  return `${file}.pub`;
}

function writeNew(file: string, text: string, mode: number): boolean {
  mkdirSync(dirname(file), { recursive: true, mode: 0o700 });
  let fd: number;
  try {
    fd = openSync(file, 'wx', mode);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'EEXIST') return false;
    throw error;
  }
  try {
    writeSync(fd, text);
  } finally {
    closeSync(fd);
  }
  return true;
}

/**
 * Creates a key pair unless the private file exists: `file` (0600, the control worker's) and
 * `file.pub` (0644, the agents' and routers'). An existing file is left as it is (`llmgw up`
 * keeps its key across runs, so engines it started stay verifiable); a missing .pub next to an
 * Ed25519 private file is written from it. Returns true when it created the private file.
 */
export function ensureCatalogKeyFile(file: string): boolean {
  const pair = newKeyPairLines();
  const created = writeNew(file, `${pair.privateLine}\n`, 0o600);
  const signing = readCatalogKeys(file).signing;
  if (signing?.kind === 'ed25519') writeNew(publicKeyFileOf(file), `${publicLine(signing)}\n`, 0o644);
  return created;
}
