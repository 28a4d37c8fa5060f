// `llmgw temporal start-postgres` and `stop-postgres`: Temporal on PostgreSQL from the
// command line, in the foreground (Ctrl-C stops it) or detached for scripts.
import { parseDynamicConfigFlags } from './server-config.js';
import { startPostgresTemporal, stopPostgresTemporal } from './server.js';

export interface StartPostgresFlags {
  port: string;
  ip: string;
  namespace: string;
  historyShards?: string;
  stateDir?: string;
  detach?: boolean;
  dynamicConfigValue: string[];
}

export async function startPostgresCommand(flags: StartPostgresFlags): Promise<void> {
  const stateDirFlag = flags.stateDir ? ` --state-dir ${flags.stateDir}` : '';
  const server = await startPostgresTemporal({
    port: Number(flags.port),
    ip: flags.ip,
    namespace: flags.namespace,
    numHistoryShards: flags.historyShards ? Number(flags.historyShards) : undefined,
    stateDir: flags.stateDir,
    dynamicConfig: parseDynamicConfigFlags(flags.dynamicConfigValue),
  });
  console.log(`Temporal on PostgreSQL ready at ${server.address}, namespace ${server.namespace} (pid ${server.pid})`);
  console.log(`databases: ${server.postgres}`);
  console.log(`log: ${server.logFile}`);
  console.log(`use it: export TEMPORAL_ADDRESS=${server.address} TEMPORAL_NAMESPACE=${server.namespace}`);
  if (flags.detach) {
    console.log(`stop it with: llmgw temporal stop-postgres${stateDirFlag}   (--purge also deletes its data)`);
    // The server is in its own process group with its output in its log: leaving is enough.
    process.exit(0);
  }
  console.log(`Ctrl-C stops it (its data stays; \`llmgw temporal stop-postgres${stateDirFlag} --purge\` deletes it).`);
  const stop = (): void => void server.stop();
  process.once('SIGINT', stop);
  process.once('SIGTERM', stop);
  const code = await server.exited;
  await server.stop();
  if (code !== 0 && code !== null) process.exitCode = code;
}

export async function stopPostgresCommand(flags: { purge?: boolean; stateDir?: string }): Promise<void> {
  await stopPostgresTemporal({ purge: flags.purge, stateDir: flags.stateDir });
}
