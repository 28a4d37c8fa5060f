// Multi-node rendezvous for the fake engine, both ends: rank 0 listens on the leader address
// and counts workers; each worker connects, says hello with its rank and holds the connection.
// It stands in for Ray / torch.distributed: the group is whole only while every worker is there.
import net from 'node:net';
import type { LeaderAddress } from './options.js';

const RETRY_MS = 250;
const MAX_LINE = 1024;

export interface RendezvousLeader {
  readonly port: number;
  /** Every worker rank 1..nnodes-1 is connected. */
  complete(): boolean;
  /**
   * A worker left after the group had formed. Sticky, as with a real engine whose collective
   * group lost a member: the replica has to be replaced, not waited on.
   */
  broken(): boolean;
  joinedRanks(): number[];
  close(): Promise<void>;
}

export interface RendezvousEvents {
  log(line: string): void;
  /** A worker joined or left (leader side). */
  changed?(): void;
}

/** Rank 0's end: listens on `address` (port 0 picks one) until closed. */
export async function listenForWorkers(address: LeaderAddress, nnodes: number, events: RendezvousEvents): Promise<RendezvousLeader> {
  const workers = new Map<number, net.Socket>();
  const sockets = new Set<net.Socket>();
  let formed = false;
  let isBroken = false;

  const server = net.createServer((socket) => {
    sockets.add(socket);
    socket.setKeepAlive(true, 5_000);
    socket.setEncoding('utf8');
    let rank: number | undefined;
    readLines(socket, (line) => {
      if (rank !== undefined) return;
      const match = /^hello (\d+)$/.exec(line);
      const claimed = match ? Number(match[1]) : NaN;
      if (!Number.isInteger(claimed) || claimed < 1 || claimed >= nnodes) {
        socket.end(`reject rank must be 1..${nnodes - 1}, got "${line}"\n`);
        return;
      }
      if (workers.has(claimed)) {
        socket.end(`reject rank ${claimed} has already joined\n`);
        return;
      }
      rank = claimed;
      workers.set(rank, socket);
      socket.write('welcome\n');
      events.log(`fake-engine: worker rank ${rank} joined (${workers.size}/${nnodes - 1}) from ${socket.remoteAddress}`);
      if (workers.size === nnodes - 1 && !formed) {
        formed = true;
        events.log(`fake-engine: all ${nnodes} nodes joined`);
      }
      events.changed?.();
    });
    socket.on('error', () => {});
    socket.on('close', () => {
      sockets.delete(socket);
      if (rank === undefined || workers.get(rank) !== socket) return;
      workers.delete(rank);
      if (formed && !isBroken) isBroken = true;
      events.log(`fake-engine: worker rank ${rank} left${formed ? '; the engine group is broken' : ''}`);
      events.changed?.();
    });
  });

  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(address.port, address.host, () => {
      server.off('error', reject);
      resolve();
    });
  });
  const bound = server.address();
  const port = typeof bound === 'object' && bound !== null ? bound.port : address.port;
  events.log(`fake-engine: rendezvous listening on ${address.host}:${port} for ${nnodes - 1} workers`);

  return {
    port,
    complete: () => workers.size === nnodes - 1,
    broken: () => isBroken,
    joinedRanks: () => [...workers.keys()].sort((a, b) => a - b),
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        for (const socket of sockets) socket.destroy();
      }),
  };
}

export interface RendezvousWorker {
  joined(): boolean;
  close(): void;
}

export interface WorkerEvents extends RendezvousEvents {
  /** The leader accepted us: the node is part of the group. */
  onJoined(): void;
  /** The leader is gone, refused us, or never answered in time: the worker must exit. */
  onLost(reason: string): void;
}

/** A worker's end: connects to the leader, retrying until `deadlineMs` (epoch ms). */
export function joinLeader(leader: LeaderAddress, rank: number, deadlineMs: number, events: WorkerEvents): RendezvousWorker {
  let joined = false;
  let closed = false;
  let socket: net.Socket | undefined;
  let retry: NodeJS.Timeout | undefined;

  const lose = (reason: string) => {
    if (closed) return;
    closed = true;
    events.onLost(reason);
  };

  const attempt = () => {
    if (closed) return;
    let rejected: string | undefined;
    const s = net.connect({ host: leader.host, port: leader.port });
    socket = s;
    s.setEncoding('utf8');
    s.on('connect', () => {
      s.setKeepAlive(true, 5_000);
      s.write(`hello ${rank}\n`);
    });
    readLines(s, (line) => {
      if (line === 'welcome' && !joined) {
        joined = true;
        events.log(`fake-engine: joined leader ${leader.host}:${leader.port} as rank ${rank}`);
        events.onJoined();
      } else if (line.startsWith('reject ')) {
        rejected = line.slice('reject '.length);
      }
    });
    s.on('error', () => {});
    s.on('close', () => {
      if (closed) return;
      if (joined) return lose(`lost the leader connection ${leader.host}:${leader.port}`);
      if (rejected !== undefined) return lose(`leader refused rank ${rank}: ${rejected}`);
      if (Date.now() >= deadlineMs) return lose(`could not join leader ${leader.host}:${leader.port} in time`);
      retry = setTimeout(attempt, RETRY_MS);
    });
  };
  attempt();

  return {
    joined: () => joined,
    close: () => {
      closed = true;
      if (retry) clearTimeout(retry);
      socket?.destroy();
    },
  };
}

function readLines(socket: net.Socket, onLine: (line: string) => void): void {
  let buffered = '';
  socket.on('data', (chunk: string) => {
    buffered += chunk;
    let nl: number;
    while ((nl = buffered.indexOf('\n')) >= 0) {
      onLine(buffered.slice(0, nl).trim());
      buffered = buffered.slice(nl + 1);
    }
    if (buffered.length > MAX_LINE) socket.destroy();
  });
}
