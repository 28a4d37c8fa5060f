// An agent's signed reports: the shards it runs (a survey's or describe's answer, signed for the
// one reconcile run that asked) and the weights its cache holds (the weightsHeld signal). Each is
// `<base64url header>.<signature>` by the agent's own enrolled key, over the node, the report's
// digest, when it was signed and until when it holds. Process side: the agent signs, the control
// worker verifies where a report is acted on (inspectNode, placement), never the node workflow
// (docs/signed-statements.md, "Agent reports").
import { createHash } from 'node:crypto';
import { toBinary } from '@bufbuild/protobuf';
import { RegisterSchema, type Register } from '../proto/gen/llmgw/v1/register_pb.js';
import { parseKeyLine, type CatalogKeyring } from './catalog-key.js';
import type { HeldWeights } from './node-types.js';
import { signStatement, verifyStatement } from './signature.js';

const DOMAIN = 'llmgw agent report v1';

/** A shard report is acted on by the run that asked within seconds; after this it is an old one replayed. */
export const SHARD_REPORT_TTL_MS = 10 * 60_000;
/** How far a report may be signed ahead of the verifier's clock (hosts' clocks differ). */
export const REPORT_CLOCK_SKEW_MS = 5 * 60_000;

export interface ReportHeader {
  kind: 'shards' | 'weights';
  nodeId: string;
  /** shards: the reconcile workflow and run that asked (the activity's caller); weights: empty. */
  workflowId: string;
  runId: string;
  /** ms since the epoch, the agent's clock. */
  signedAt: number;
  /** ms since the epoch; 0: no expiry of its own (weights: superseded by the next registration). */
  expiresAt: number;
  /** SHA-256 of the report's bytes, base64url. */
  digest: string;
}

const FIELDS: (keyof ReportHeader)[] = ['kind', 'nodeId', 'workflowId', 'runId', 'signedAt', 'expiresAt', 'digest'];

function canonical(header: ReportHeader): string {
  return JSON.stringify(FIELDS.map((field) => [field, header[field]]));
}

const sha256 = (bytes: Uint8Array | string): string => createHash('sha256').update(bytes).digest('base64url');

/** A shard report's bytes as the control worker decodes them, its own signature left out. */
export function shardReportDigest(register: Register): string {
  return sha256(toBinary(RegisterSchema, { ...register, reportSignature: '' }));
}

/** The weights list with each entry's keys sorted: JSON key order is not the report. */
export function weightsDigest(weights: HeldWeights[]): string {
  const sorted = weights.map((w) => Object.fromEntries(Object.entries(w).sort(([a], [b]) => a.localeCompare(b))));
  return sha256(JSON.stringify(sorted));
}

export function signReport(header: ReportHeader, agentKey: CatalogKeyring): string {
  const body = Buffer.from(canonical(header), 'utf8').toString('base64url');
  return `${body}.${signStatement(DOMAIN, canonical(header), agentKey)}`;
}

function parse(body: string): ReportHeader | undefined {
  try {
    const pairs = JSON.parse(Buffer.from(body, 'base64url').toString('utf8')) as unknown;
    if (!Array.isArray(pairs) || pairs.length !== FIELDS.length) return undefined;
    const out: Record<string, unknown> = {};
    for (const [index, pair] of pairs.entries()) {
      if (!Array.isArray(pair) || pair[0] !== FIELDS[index]) return undefined;
      out[FIELDS[index]!] = pair[1];
    }
    return out as unknown as ReportHeader;
  } catch {
    return undefined;
  }
}

/** What the verifier expects a report's header to say; `notBefore`: a genuine one is signed after it. */
export interface ExpectedReport {
  kind: ReportHeader['kind'];
  nodeId: string;
  digest: string;
  /** The runs it may be signed for (`''`, `''`: for nobody in particular); absent: any. */
  callers?: { workflowId: string; runId: string }[];
  notBefore?: number;
  now: number;
}

/** Why `text` is not node `expected.nodeId`'s agent's word for this report under `agentKey`, or undefined when it is. */
export function reportProblem(text: string | undefined, agentKey: string, expected: ExpectedReport): string | undefined {
  if (!text) return `it is unsigned (an agent older than signed reports, or not node ${expected.nodeId}'s agent at all)`;
  const dot = text.indexOf('.');
  const said = dot > 0 ? parse(text.slice(0, dot)) : undefined;
  if (!said) return 'its signature is malformed';
  let key;
  try {
    key = parseKeyLine(agentKey, 'the enrolled agent key');
  } catch (error) {
    return (error as Error).message;
  }
  const verdict = verifyStatement(DOMAIN, canonical(said), text.slice(dot + 1), [key]);
  if (!verdict.ok) return `its signature does not verify against node ${expected.nodeId}'s enrolled key (${verdict.why})`;
  const problems: string[] = [];
  for (const field of ['kind', 'nodeId', 'digest'] as const) {
    if (said[field] !== expected[field])
      problems.push(`it names ${field} ${JSON.stringify(said[field])}, not ${JSON.stringify(expected[field])}`);
  }
  if (expected.callers && !expected.callers.some((c) => c.workflowId === said.workflowId && c.runId === said.runId))
    problems.push(`it was signed for ${said.workflowId || 'nobody'} run ${said.runId || '-'}, not this run (replayed)`);
  if (!Number.isFinite(said.signedAt) || said.signedAt > expected.now + REPORT_CLOCK_SKEW_MS)
    problems.push('it was signed in the future (the host clock is off)');
  if (said.expiresAt !== 0 && !(said.expiresAt > expected.now)) problems.push(`it expired at ${new Date(said.expiresAt).toISOString()}`);
  if (expected.notBefore !== undefined && !(said.signedAt >= expected.notBefore))
    problems.push(
      `it was signed at ${new Date(said.signedAt).toISOString()}, before the agent's latest registration (an old one replayed)`,
    );
  return problems.length ? problems.join('; ') : undefined;
}
