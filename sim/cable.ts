// A simulated host's network cable to Temporal: a loopback TCP relay its connection goes
// through, which the fleet can cut. Simulated-fleet side. Cut, the host's polls, activity
// heartbeats, worker heartbeats and completions all stop at once and nothing more reaches
// the server — not even a worker's shutdown, which in-process would otherwise tell Temporal
// the worker left (ShutdownWorker) instead of letting it find out, as it must for a dead host.
import { connect, createServer, type Socket } from 'node:net';

export interface Cable {
  /** host:port to give the host's Temporal connection instead of the server's. */
  address: string;
  /** Ends every connection through it and refuses new ones, for good. */
  cut(): void;
}

export async function openCable(target: string): Promise<Cable> {
  const { host, port } = splitAddress(target);
  const sockets = new Set<Socket>();
  let cut = false;
  const server = createServer((inbound) => {
    if (cut) return inbound.destroy();
    const outbound = connect({ host, port });
    for (const socket of [inbound, outbound]) {
      sockets.add(socket);
      socket.setNoDelay(true);
      socket.on('error', () => undefined);
      socket.once('close', () => {
        sockets.delete(socket);
        inbound.destroy();
        outbound.destroy();
      });
    }
    inbound.pipe(outbound);
    outbound.pipe(inbound);
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen({ host: '127.0.0.1', port: 0 }, () => resolve());
  });
  const address = server.address();
  if (address === null || typeof address === 'string') throw new Error('the cable did not get a TCP port');
  return {
    address: `127.0.0.1:${address.port}`,
    cut() {
      if (cut) return;
      cut = true;
      server.close();
      for (const socket of sockets) socket.destroy();
    },
  };
}

function splitAddress(address: string): { host: string; port: number } {
  const match = /^\[?([^\]]+?)\]?:(\d+)$/.exec(address);
  if (!match) throw new Error(`expected HOST:PORT for Temporal, got ${address}`);
  return { host: match[1]!, port: Number(match[2]) };
}
