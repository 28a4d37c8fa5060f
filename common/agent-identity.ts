// An agent's own Ed25519 identity: the key pair it makes on its host (state dir, 0600), its
// signature over each registration, and the operator's enrollment of its public key, signed with
// the catalog key. Process side (node:crypto); the node workflow asks the control worker to
// verify (activities/registration-check.ts), so a `register` signal from anyone else changes
// nothing on a node whose agent is enrolled (docs/signed-statements.md, "Agent identity").
import { createHash } from 'node:crypto';
import { toBinary } from '@bufbuild/protobuf';
import { closeSync, fsyncSync, mkdirSync, openSync, readFileSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import { RegisterSchema, type Register } from '../proto/gen/llmgw/v1/register_pb.js';
import { newKeyPairLines, parseKeyLine, publicLine, type CatalogKey, type CatalogKeyring } from './catalog-key.js';
import type { AgentEnrollment, RegisterProof } from './node-types.js';
import { signStatement, verifyStatement } from './signature.js';

/** The agent's private key, in its state dir. */
export const AGENT_KEY_FILE = 'agent.key';

const REGISTER_DOMAIN = 'llmgw agent registration v1';
const ENROLL_DOMAIN = 'llmgw agent enrollment v1';
/** A registration signed longer ago than this (or this far ahead) is not acted on: a replay, or a clock far off. */
export const REGISTRATION_MAX_AGE_MS = 10 * 60_000;

export interface AgentIdentity {
  key: CatalogKey;
  /** `ed25519-public:…`: what the operator enrolls. */
  publicKey: string;
}

/** The agent's key pair from `stateDir`, made there (0600) on first use. */
export function loadOrCreateAgentKey(stateDir: string): AgentIdentity {
  const file = join(stateDir, AGENT_KEY_FILE);
  writeNewKey(file);
  const line = readFileSync(file, 'utf8').trim();
  const key = parseKeyLine(line, file);
  if (key.kind !== 'ed25519' || !key.privateKey) throw new Error(`${file} holds no Ed25519 private key: move it away and start again`);
  return { key, publicKey: publicLine(key) };
}

/** Writes a fresh private key to `file` (0600) unless it exists: an agent keeps its identity across restarts. */
function writeNewKey(file: string): void {
  mkdirSync(join(file, '..'), { recursive: true, mode: 0o700 });
  let fd: number;
  try {
    fd = openSync(file, 'wx', 0o600);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'EEXIST') return;
    throw error;
  }
  try {
    writeSync(fd, `${newKeyPairLines().privateLine}\n`);
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
}

/** A public key as given on a command line: `ed25519-public:…` or its bare base64url. */
export function normalisePublicKey(text: string): string {
  const line = text.trim().startsWith('ed25519-') ? text.trim() : `ed25519-public:${text.trim()}`;
  if (!line.startsWith('ed25519-public:')) throw new Error("give the agent's public key (ed25519-public:…), never a private one");
  const key = parseKeyLine(line, 'the public key given');
  return publicLine(key);
}

function keyOf(publicKey: string): CatalogKey {
  return parseKeyLine(publicKey, 'an agent public key');
}

/** The report's bytes as the control worker decodes them: what the signature binds, address and all. */
function registerDigest(register: Register): string {
  return createHash('sha256').update(toBinary(RegisterSchema, register)).digest('base64url');
}

function registerPayload(nodeId: string, signedAt: string, register: Register): string {
  return `${nodeId}\n${signedAt}\n${registerDigest(register)}`;
}

export function signRegistration(register: Register, identity: AgentIdentity, enrollment?: AgentEnrollment): RegisterProof {
  const signedAt = new Date().toISOString();
  const ring: CatalogKeyring = { file: AGENT_KEY_FILE, signing: identity.key, all: [identity.key] };
  const signature = signStatement(REGISTER_DOMAIN, registerPayload(register.nodeId, signedAt, register), ring);
  return { publicKey: identity.publicKey, signedAt, signature, ...(enrollment ? { enrollment } : {}) };
}

/** Why `proof` does not vouch for `register` as node `nodeId`'s under `enrolledKey`, or undefined when it does. */
export function registrationProblem(
  nodeId: string,
  register: Register,
  proof: RegisterProof,
  enrolledKey: string,
  now: number,
): string | undefined {
  if (register.nodeId !== nodeId) return `the report names node ${register.nodeId}, not ${nodeId}`;
  if (proof.publicKey !== enrolledKey) return `signed with ${proof.publicKey}, not the enrolled key ${enrolledKey}`;
  const verdict = verifyStatement(REGISTER_DOMAIN, registerPayload(nodeId, proof.signedAt, register), proof.signature, [
    keyOf(enrolledKey),
  ]);
  if (!verdict.ok) return `its signature does not verify (${verdict.why}) against the enrolled key`;
  const at = Date.parse(proof.signedAt);
  if (!Number.isFinite(at) || Math.abs(now - at) > REGISTRATION_MAX_AGE_MS)
    return `it was signed at ${proof.signedAt}, more than ${REGISTRATION_MAX_AGE_MS / 60_000} minutes from now (replayed, or the host's clock is off)`;
  return undefined;
}

function enrollPayload(e: Omit<AgentEnrollment, 'signature'>): string {
  return `${e.nodeId}\n${e.publicKey}\n${e.enrolledAt}`;
}

/** The operator's enrollment of `publicKey` for `nodeId`, signed with the catalog key. */
export function signEnrollment(nodeId: string, publicKey: string, keyring: CatalogKeyring, at = new Date()): AgentEnrollment {
  const statement = { nodeId, publicKey: normalisePublicKey(publicKey), enrolledAt: at.toISOString() };
  return { ...statement, signature: signStatement(ENROLL_DOMAIN, enrollPayload(statement), keyring) };
}

/** Why `enrollment` is not the operator's word for `nodeId`, or undefined when it is. */
export function enrollmentProblem(nodeId: string, enrollment: AgentEnrollment, catalogKeys: CatalogKey[]): string | undefined {
  if (enrollment.nodeId !== nodeId) return `it enrolls node ${enrollment.nodeId}, not ${nodeId}`;
  const verdict = verifyStatement(ENROLL_DOMAIN, enrollPayload(enrollment), enrollment.signature, catalogKeys);
  if (!verdict.ok) return `its signature does not verify against the catalog key (${verdict.why})`;
  return undefined;
}
