// Temporal's two databases on PostgreSQL, through the server's own SQL tool: created if
// missing, versioned, and brought to the schema embedded in the pinned server (the
// module's schema/postgresql/v12/{temporal,visibility}), exactly as a self-hosted cluster is set up.
import { lastLines, runProgram } from './exec.js';
import { visibilityDatabase, type PostgresTarget } from './target.js';

const PLUGIN = 'postgres12';
const SCHEMAS = { main: 'postgresql/v12/temporal', visibility: 'postgresql/v12/visibility' } as const;

function connectionArgs(target: PostgresTarget, database: string): string[] {
  const args = ['--ep', target.host, '-p', String(target.port), '-u', target.user, '--pl', PLUGIN, '--db', database];
  if (target.tls.enabled) {
    args.push('--tls');
    if (!target.tls.verifyHost) args.push('--tls-disable-host-verification');
    if (target.tls.caFile) args.push('--tls-ca-file', target.tls.caFile);
  }
  return args;
}

// The tool colours its log levels for a terminal; messages quote them plain.
const ANSI_COLOUR = new RegExp(`${String.fromCharCode(27)}\\[[0-9;]*m`, 'g');

/** The first `"error": "..."` of the tool's log lines: the cause, without the log noise around it. */
function causeOf(output: string): string {
  const match = /"error": "((?:[^"\\]|\\.)*)"/.exec(output);
  if (!match) return lastLines(output.replace(ANSI_COLOUR, ''), 6);
  try {
    return JSON.parse(`"${match[1]}"`) as string;
  } catch {
    return match[1] ?? output;
  }
}

async function sqlTool(bin: string, target: PostgresTarget, database: string, command: string[]): Promise<void> {
  // The password travels in SQL_PASSWORD, the tool's own variable, not on a command line
  // that `ps` shows to every user.
  const result = await runProgram(bin, [...connectionArgs(target, database), ...command], {
    env: { ...process.env, SQL_PASSWORD: target.password },
    timeoutMs: 180_000,
  });
  if (result.code === 0) return;
  const cause = result.timedOut ? 'it did not finish within 180 s' : causeOf(result.output);
  let hint = '';
  if (/password authentication failed|no pg_hba.conf entry|role .* does not exist/.test(cause))
    hint = `\nFix the user and password in ${target.source.split('=')[0]}, or give that user access.`;
  else if (/permission denied to create database/.test(cause))
    hint = `\nGive ${target.user} CREATEDB (\`ALTER ROLE ${target.user} CREATEDB\`), or create ${database} yourself, owned by ${target.user}.`;
  else if (/connection refused|no such host|i\/o timeout/.test(cause)) hint = '\nIs PostgreSQL running there? Start it, or fix the URL.';
  throw new Error(`\`temporal-sql-tool ${command[0]}\` on ${database} at ${target.source} failed: ${cause}${hint}`);
}

/**
 * Creates both databases if they are missing and applies every schema version not yet
 * applied; returns the databases it created. Safe to run again.
 */
export async function ensureSchemas(sqlToolBin: string, target: PostgresTarget, log: (line: string) => void): Promise<string[]> {
  const created: string[] = [];
  for (const [which, schemaName] of Object.entries(SCHEMAS)) {
    const database = which === 'main' ? target.database : visibilityDatabase(target);
    // setup-schema -v 0.0 only adds the version tables if they are missing, so it doubles as
    // the test of whether the database exists: create-database itself succeeds either way,
    // and teardown must drop only what llmgw created.
    try {
      await sqlTool(sqlToolBin, target, database, ['setup-schema', '-v', '0.0']);
    } catch (error) {
      if (!(error instanceof Error && /does not exist/.test(error.message))) throw error;
      await sqlTool(sqlToolBin, target, database, ['create-database']);
      created.push(database);
      await sqlTool(sqlToolBin, target, database, ['setup-schema', '-v', '0.0']);
    }
    // Applies what is newer than what the database has: a server upgrade moves it forward.
    await sqlTool(sqlToolBin, target, database, ['update-schema', '--schema-name', schemaName]);
    log(`llmgw: database ${database} is at the schema of Temporal's ${schemaName}${created.includes(database) ? ' (created)' : ''}`);
  }
  return created;
}

/** Drops databases llmgw created (teardown with --purge on a PostgreSQL llmgw does not own). */
export async function dropDatabases(sqlToolBin: string, target: PostgresTarget, databases: string[]): Promise<void> {
  for (const database of databases) await sqlTool(sqlToolBin, target, database, ['drop-database', '-f']);
}
