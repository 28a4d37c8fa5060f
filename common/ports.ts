// Port helpers for processes that share one machine (simulated agents, test servers):
// a port is only handed out after a real bind shows it is free.
import { createServer } from 'node:net';

export function isPortFree(port: number, host = '127.0.0.1'): Promise<boolean> {
  return new Promise((resolve) => {
    const server = createServer();
    server.unref();
    server.once('error', () => resolve(false));
    server.listen({ port, host, exclusive: true }, () => server.close(() => resolve(true)));
  });
}

/** A port the OS says is free now (it may be taken again later: callers bind soon after). */
export function findFreePort(host = '127.0.0.1'): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.unref();
    server.once('error', reject);
    server.listen({ port: 0, host }, () => {
      const address = server.address();
      const port = typeof address === 'object' && address ? address.port : 0;
      server.close(() => resolve(port));
    });
  });
}

/**
 * A free port that `reserved` does not claim: a process that picks its ports at random (the dev
 * server's HTTP and metrics ports) must not take one that its caller has promised to another
 * part, which would then fail to bind. Gives up after 50 tries.
 */
export async function findFreePortAvoiding(reserved: (port: number) => boolean, host = '127.0.0.1'): Promise<number> {
  for (let attempt = 0; attempt < 50; attempt++) {
    const port = await findFreePort(host);
    if (!reserved(port)) return port;
  }
  throw new Error('no free port outside the reserved ones after 50 tries');
}
