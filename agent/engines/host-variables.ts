// The variables of the agent's own host that engines may receive: `--pass-env` names, taken
// from the agent's environment and given to every engine, and `--env-file` entries, given
// only to engines whose profile references them ({fromHost: NAME} in the catalog). Agent
// side. This is where secrets live: their values go into an engine's environment and
// nowhere else (not the spec file, not a log line, not an error, not a Temporal payload).
import { readFileSync, statSync } from 'node:fs';
import { ApplicationFailure } from '@temporalio/common';
import { FailureType } from '../../common/failures.js';
import type { StartShard } from '../../proto/gen/llmgw/v1/shard_pb.js';

const NAME = /^[A-Za-z_][A-Za-z0-9_]*$/;

export interface HostEnvSource {
  /** Names of the agent's own variables that every engine gets. */
  passEnv: string[];
  /** A file of NAME=value lines, read at every spawn (so an edit needs no restart). */
  envFile?: string;
}

/**
 * Parses NAME=value lines (dotenv-like: `#` comments, blank lines, an optional `export `, values
 * optionally in single or double quotes). A bad line is named by its number, never its value.
 */
export function parseEnvFile(text: string, file: string): Record<string, string> {
  // No prototype: a line `__proto__=x` must be a variable like any other, not a prototype.
  const out: Record<string, string> = Object.create(null) as Record<string, string>;
  text.split('\n').forEach((raw, index) => {
    const line = raw.trim();
    if (line === '' || line.startsWith('#')) return;
    const body = line.startsWith('export ') ? line.slice('export '.length).trimStart() : line;
    const eq = body.indexOf('=');
    const name = eq > 0 ? body.slice(0, eq).trim() : '';
    if (!NAME.test(name)) throw new Error(`${file} line ${index + 1}: expected NAME=value with NAME a variable name`);
    let value = body.slice(eq + 1).trim();
    const quote = value[0];
    if ((quote === '"' || quote === "'") && value.length >= 2 && value.endsWith(quote)) value = value.slice(1, -1);
    out[name] = value;
  });
  return out;
}

export function readEnvFile(file: string): Record<string, string> {
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (error) {
    throw new Error(`cannot read the env file ${file}: ${(error as NodeJS.ErrnoException).code ?? String(error)}`, { cause: error });
  }
  return parseEnvFile(text, file);
}

/** A secret file readable by others is everyone's secret. */
export function envFileWarnings(file: string): string[] {
  try {
    const mode = statSync(file).mode & 0o777;
    if (mode & 0o077) return [`the env file ${file} is readable by others (mode ${mode.toString(8)}): chmod 600 it`];
  } catch {
    // readEnvFile reports an unreadable file.
  }
  return [];
}

export interface HostEnvironment {
  /** The --pass-env variables that are set: every engine gets these. */
  passed: Record<string, string>;
  /** A host variable for a reference: the env file's first, then a --pass-env one. */
  lookup(name: string): string | undefined;
}

export function hostEnvironment(source: HostEnvSource, env: NodeJS.ProcessEnv = process.env): HostEnvironment {
  const passed: Record<string, string> = Object.create(null) as Record<string, string>;
  for (const name of source.passEnv) {
    const value = ownValue(env, name);
    if (value !== undefined) passed[name] = value;
  }
  const fromFile = source.envFile === undefined ? {} : readEnvFile(source.envFile);
  // Own properties only: `{fromHost: constructor}` must find nothing, not Object.prototype's
  // constructor, whose text would become an engine's variable and a "resolved" reference.
  return { passed, lookup: (name) => ownValue(fromFile, name) ?? ownValue(passed, name) };
}

function ownValue(values: Record<string, string | undefined>, name: string): string | undefined {
  if (!Object.hasOwn(values, name)) return undefined;
  const value = values[name];
  return typeof value === 'string' ? value : undefined;
}

/**
 * The values of the profile's host references ({fromHost: NAME}), for the engine's environment.
 * Throws a non-retryable HostEnvMissing failure that names every missing variable and how to
 * give it, and never a value.
 */
export function resolveHostReferences(spec: StartShard, source: HostEnvSource): Record<string, string> {
  const references = Object.entries(spec.profile?.envFromHost ?? {});
  if (references.length === 0) return {};
  let host: HostEnvironment;
  try {
    host = hostEnvironment(source);
  } catch (error) {
    throw ApplicationFailure.nonRetryable(
      `shard ${spec.shardId}: ${error instanceof Error ? error.message : String(error)}; its profile takes variables from the host`,
      FailureType.HostEnvMissing,
    );
  }
  const resolved: Record<string, string> = Object.create(null) as Record<string, string>;
  const missing: string[] = [];
  for (const [name, hostName] of references) {
    const value = host.lookup(hostName);
    if (value === undefined) missing.push(name === hostName ? name : `${name} (from ${hostName})`);
    else resolved[name] = value;
  }
  if (missing.length > 0) {
    const names = [...new Set(references.filter(([name]) => !Object.hasOwn(resolved, name)).map(([, hostName]) => hostName))];
    throw ApplicationFailure.nonRetryable(
      `shard ${spec.shardId} of ${spec.replicaId}: its profile takes ${missing.join(', ')} from this host, and agent ${spec.nodeId} was not given ${names.join(', ')}: start it with --pass-env ${names.join(',')} or put ${names.length === 1 ? 'it' : 'them'} in its --env-file${source.envFile ? ` (${source.envFile})` : ''}`,
      FailureType.HostEnvMissing,
      { shardId: spec.shardId, missing: names },
    );
  }
  return resolved;
}
