// An agent's signed reports: the shards it runs (a survey's or describe's answer, signed for the
// one reconcile run that asked) and the weights its cache holds (the weightsHeld signal). Each is
// `<base64url header>.<signature>` by the agent's own enrolled key, over the node, the report's
// digest, when it was signed and until when it holds. Process side: the agent signs, the control
// worker verifies where a report is acted on (inspectNode, placement), never the node workflow
// (docs/signed-statements.md, "Agent reports").
import { createHash } from 'node:crypto';
import { toBinary } from '@bufbuild/protobuf';
import { RegisterSchema, type Register } from '../proto/gen/llmgw/v1/register_pb.js';
import type { CatalogKeyring } from './catalog-key.js';
import type { HeldWeights } from './node-types.js';
import { fieldMismatches, openingProblem, openStatement, signedStatement, windowProblems, type StatementForm } from './signed-statement.js';

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

const FORM: StatementForm<ReportHeader> = {
  domain: 'llmgw agent report v1',
  fields: ['kind', 'nodeId', 'workflowId', 'runId', 'signedAt', 'expiresAt', 'digest'],
};

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
  return signedStatement(FORM, header, agentKey);
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
  const opened = openStatement(FORM, text, agentKey);
  if (!opened.ok) return openingProblem(opened, 'its signature', `node ${expected.nodeId}'s enrolled key`);
  const said = opened.statement;
  const problems = fieldMismatches(said, expected, ['kind', 'nodeId', 'digest'], 'names');
  if (expected.callers && !expected.callers.some((c) => c.workflowId === said.workflowId && c.runId === said.runId))
    problems.push(`it was signed for ${said.workflowId || 'nobody'} run ${said.runId || '-'}, not this run (replayed)`);
  const notBefore = expected.notBefore;
  problems.push(
    ...windowProblems(said.signedAt, {
      now: expected.now,
      clockSkewMs: REPORT_CLOCK_SKEW_MS,
      expiresAt: said.expiresAt !== 0 ? said.expiresAt : undefined,
      notBefore:
        notBefore !== undefined ? { at: notBefore, earlier: "before the agent's latest registration (an old one replayed)" } : undefined,
    }),
  );
  return problems.length ? problems.join('; ') : undefined;
}
