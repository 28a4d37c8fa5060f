// The catalog key: a secret shared by the control worker, which signs every revision it
// resolves from the catalog, and the agents, which start only revisions whose signature
// verifies (docs/security.md). Process side. One key a line; the first signs, all verify,
// so a key is rotated by adding the new one everywhere before signing with it.
import { createHash, randomBytes } from 'node:crypto';
import { closeSync, mkdirSync, openSync, readFileSync, statSync, writeSync } from 'node:fs';
import { dirname } from 'node:path';

export interface CatalogKey {
  /** Names the key in signatures (not secret): which key signed, and which the agent lacks. */
  id: string;
  secret: Buffer;
}

export interface CatalogKeyring {
  file: string;
  /** The key new signatures are made with: the file's first. */
  signing: CatalogKey;
  /** Every key in the file, the signing one included. */
  all: CatalogKey[];
}

/** The shortest key accepted: 32 characters (`llmgw up` writes 64 hex digits, 256 bits). */
export const MIN_KEY_LENGTH = 32;

export function keyId(secret: Buffer): string {
  return createHash('sha256').update('llmgw catalog key id\n').update(secret).digest('hex').slice(0, 12);
}

/** Reads and checks the key file; every problem names the file and never a key. */
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
    if (line.length < MIN_KEY_LENGTH) {
      throw new Error(
        `the catalog key on line ${index + 1} of ${file} is shorter than ${MIN_KEY_LENGTH} characters: use a random one (e.g. \`openssl rand -hex 32\`)`,
      );
    }
    const secret = Buffer.from(line, 'utf8');
    keys.push({ id: keyId(secret), secret });
  });
  const [signing] = keys;
  if (!signing) throw new Error(`the catalog key file ${file} holds no key (one key a line; the first signs)`);
  return { file, signing, all: keys };
}

/** What is wrong with how the file is kept (a key readable by others is anyone's to sign with). */
export function keyFileWarnings(file: string): string[] {
  try {
    const mode = statSync(file).mode & 0o777;
    if (mode & 0o077) return [`the catalog key file ${file} is readable by others (mode ${mode.toString(8)}): chmod 600 it`];
  } catch {
    // Unreadable files are reported by readCatalogKeys.
  }
  return [];
}

/**
 * Creates a key file with one fresh 256-bit key, mode 0600, unless the file exists (then it is
 * left as it is: `llmgw up` keeps its key across runs, so engines it started stay verifiable).
 * Returns true when it created the file.
 */
export function ensureCatalogKeyFile(file: string): boolean {
  mkdirSync(dirname(file), { recursive: true, mode: 0o700 });
  let fd: number;
  try {
    fd = openSync(file, 'wx', 0o600);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'EEXIST') return false;
    throw error;
  }
  try {
    writeSync(fd, `${randomBytes(32).toString('hex')}\n`);
  } finally {
    closeSync(fd);
  }
  return true;
}
