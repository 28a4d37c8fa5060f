// `llmgw temporal start-dev`: the dev server in the foreground, stopped with Ctrl-C.
import { startDevServer } from '../../temporal/dev-server.js';

export async function runDevServerCommand(opts: {
  port: string;
  uiPort: string;
  ip: string;
  dbFile?: string;
  inMemory?: boolean;
  headless?: boolean;
}): Promise<void> {
  const server = await startDevServer({
    port: Number(opts.port),
    uiPort: Number(opts.uiPort),
    ip: opts.ip,
    dbFile: opts.dbFile,
    inMemory: opts.inMemory,
    headless: opts.headless,
  });
  console.log(`Temporal dev server ready at ${server.address} (pid ${server.pid})`);
  if (server.uiUrl) console.log(`Web UI: ${server.uiUrl}`);
  console.log(server.dbFile ? `data: ${server.dbFile}` : 'data: in memory (lost when the server stops)');
  console.log(`log: ${server.logFile}`);
  console.log('Ctrl-C stops it.');
  const stop = (): void => void server.stop();
  process.once('SIGINT', stop);
  process.once('SIGTERM', stop);
  const code = await server.exited;
  if (code !== 0 && code !== null) process.exitCode = code;
}
