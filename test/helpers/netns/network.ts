// Simulated hosts on a real network for end-to-end tests: each host is a network namespace on
// a bridge, with its own address from 198.18.0.0/15 (set aside for network benchmarks; it only
// exists inside what the test makes). The bridge's own address is where Temporal, the control
// workers and the router are reached from inside. Needs root; names carry the test process's
// pid, so parallel files never collide and a later run can sweep what a crashed one left.
import { execFileSync } from 'node:child_process';
import { isIP } from 'node:net';

/** Every namespace, bridge and veth this harness makes starts with these. */
const NS_PREFIX = 'llmgw-net-';
const LINK_PREFIX = 'lgw';

export interface NetHost {
  /** h0, h1, … */
  name: string;
  /** The network namespace (`ip netns exec <ns> …`). */
  ns: string;
  address: string;
  /** The host-side end of its veth pair, on the bridge: down = the host is cut off. */
  hostLink: string;
}

export interface Network {
  /** The bridge's address in the root namespace: reachable from every host. */
  gateway: string;
  bridge: string;
  hosts: NetHost[];
  /** `ip netns exec <ns>` in front of a command (an argument vector). */
  inHost(host: NetHost, argv: string[]): string[];
  /** Runs a command in a host's namespace and returns its stdout. */
  exec(host: NetHost, argv: string[]): string;
  destroy(): void;
}

/** Why these tests cannot run here, or undefined when they can (root, and `ip netns` works). */
export function networkUnavailable(): string | undefined {
  if (process.platform !== 'linux') return 'network namespaces need Linux';
  if (process.getuid?.() !== 0) return 'network namespaces need root: run `sudo npm test`, as CI does';
  try {
    execFileSync('ip', ['netns', 'list'], { stdio: 'pipe' });
  } catch (error) {
    return `\`ip netns\` does not work here: ${String(error)}`;
  }
  try {
    execFileSync('nft', ['--version'], { stdio: 'pipe' });
  } catch {
    return 'nft is not installed: `sudo npm test` installs it (apt-get install nftables)';
  }
  return undefined;
}

function ip(args: string[]): string {
  return execFileSync('ip', args, { stdio: ['ignore', 'pipe', 'pipe'], encoding: 'utf8' });
}

function tryIp(args: string[]): void {
  try {
    ip(args);
  } catch {
    // Already gone.
  }
}

const pidAlive = (pid: number): boolean => {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
};

/** The pid a name was made by: its tag is the pid in base 36. */
const ownerOf = (tag: string): number => parseInt(tag, 36);

/**
 * Removes namespaces and links a test process left behind when it died: only those whose
 * owning pid no longer runs, so that files running side by side keep theirs.
 */
export function sweepLeftovers(): string[] {
  const removed: string[] = [];
  for (const line of ip(['netns', 'list']).split('\n')) {
    const ns = line.split(' ')[0] ?? '';
    const match = new RegExp(`^${NS_PREFIX}([0-9a-z]+)-`).exec(ns);
    if (match && !pidAlive(ownerOf(match[1]!))) {
      tryIp(['netns', 'del', ns]);
      removed.push(ns);
    }
  }
  for (const line of ip(['-o', 'link', 'show']).split('\n')) {
    const name = /^\d+: ([^:@\s]+)/.exec(line)?.[1] ?? '';
    const match = new RegExp(`^${LINK_PREFIX}([0-9a-z]+)(br|h\\d+)$`).exec(name);
    if (match && !pidAlive(ownerOf(match[1]!))) {
      tryIp(['link', 'del', name]);
      removed.push(name);
    }
  }
  return removed;
}

/** A /24 in 198.18.0.0/15 that no interface here uses yet, starting from one the pid picks. */
function freeSubnet(): string {
  const used = ip(['-4', '-o', 'addr', 'show']);
  const start = process.pid % 500;
  for (let i = 0; i < 510; i++) {
    const n = (start + i) % 510;
    const prefix = `198.${18 + Math.floor(n / 255)}.${(n % 255) + 1}`;
    if (!used.includes(` ${prefix}.`)) return prefix;
  }
  throw new Error('no free /24 left in 198.18.0.0/15');
}

/** Makes `count` hosts on one bridge. Removed by destroy(), and on process exit if not before. */
export function createNetwork(count: number): Network {
  sweepLeftovers();
  const tag = process.pid.toString(36);
  const subnet = freeSubnet();
  const bridge = `${LINK_PREFIX}${tag}br`;
  const gateway = `${subnet}.1`;
  const hosts: NetHost[] = [];
  let destroyed = false;

  const destroy = (): void => {
    if (destroyed) return;
    destroyed = true;
    for (const host of hosts) {
      tryIp(['netns', 'del', host.ns]);
      tryIp(['link', 'del', host.hostLink]);
    }
    tryIp(['link', 'del', bridge]);
  };
  // A test process that dies still leaves nothing behind (and sweepLeftovers catches a kill -9).
  process.once('exit', destroy);

  try {
    ip(['link', 'add', bridge, 'type', 'bridge']);
    ip(['addr', 'add', `${gateway}/24`, 'dev', bridge]);
    ip(['link', 'set', bridge, 'up']);
    for (let i = 0; i < count; i++) {
      const host: NetHost = {
        name: `h${i}`,
        ns: `${NS_PREFIX}${tag}-h${i}`,
        address: `${subnet}.${10 + i}`,
        hostLink: `${LINK_PREFIX}${tag}h${i}`,
      };
      hosts.push(host);
      const inner = `${host.hostLink}i`.slice(0, 15);
      ip(['netns', 'add', host.ns]);
      ip(['link', 'add', host.hostLink, 'type', 'veth', 'peer', 'name', inner]);
      ip(['link', 'set', inner, 'netns', host.ns]);
      ip(['link', 'set', host.hostLink, 'master', bridge]);
      ip(['link', 'set', host.hostLink, 'up']);
      const inNs = (args: string[]): string => ip(['-n', host.ns, ...args]);
      inNs(['link', 'set', 'lo', 'up']);
      inNs(['link', 'set', inner, 'name', 'eth0']);
      inNs(['addr', 'add', `${host.address}/24`, 'dev', 'eth0']);
      inNs(['link', 'set', 'eth0', 'up']);
      inNs(['route', 'add', 'default', 'via', gateway]);
      trackConnections(host.ns);
    }
  } catch (error) {
    destroy();
    throw error;
  }

  const inHost = (host: NetHost, argv: string[]): string[] => ['ip', 'netns', 'exec', host.ns, ...argv];
  return {
    gateway,
    bridge,
    hosts,
    inHost,
    exec: (host, argv) => execFileSync('ip', ['netns', 'exec', host.ns, ...argv], { stdio: ['ignore', 'pipe', 'pipe'], encoding: 'utf8' }),
    destroy,
  };
}

/**
 * Turns connection tracking on in a namespace before anything connects: the faults tell who
 * opened a connection by conntrack's direction, and a connection first seen mid-stream is
 * taken to be opened by whichever side sent the packet seen first, which may be the wrong one.
 */
function trackConnections(ns: string): void {
  execFileSync('ip', ['netns', 'exec', ns, 'nft', '-f', '-'], {
    input: `table inet llmgw_track {
      chain in { type filter hook input priority -10; ct state new counter; }
      chain out { type filter hook output priority -10; ct state new counter; }
    }`,
    stdio: ['pipe', 'pipe', 'pipe'],
  });
}

/** Listening TCP sockets in a host's namespace: local address, port and the owning pids. */
export function listeners(network: Network, host: NetHost): { address: string; port: number; pids: number[] }[] {
  const out = network.exec(host, ['ss', '-Hltnp']);
  return out
    .split('\n')
    .filter(Boolean)
    .map((line) => {
      const local = line.trim().split(/\s+/)[3] ?? '';
      const at = local.lastIndexOf(':');
      const pids = [...line.matchAll(/pid=(\d+)/g)].map((m) => Number(m[1]));
      return { address: local.slice(0, at).replace(/^\[|\]$/g, ''), port: Number(local.slice(at + 1)), pids };
    });
}

/** Whether a TCP connection from a host's namespace to `address:port` opens within `timeoutS` (bounded). */
export function canConnect(network: Network, host: NetHost, address: string, port: number, timeoutS = 3): boolean {
  try {
    network.exec(host, ['timeout', String(timeoutS), 'bash', '-c', `exec 3<>/dev/tcp/${address}/${port}`]);
    return true;
  } catch {
    return false;
  }
}

/**
 * Which of `ports` at `address` a host's namespace can open a TCP connection to, all tried at
 * once (a dropped SYN costs the whole `timeoutS`, so one at a time would add up).
 */
export function reachablePorts(network: Network, host: NetHost, address: string, ports: number[], timeoutS = 2): number[] {
  if (!isIP(address) || ports.some((p) => !Number.isInteger(p))) throw new Error(`not an address and ports: ${address} ${ports.join(',')}`);
  const tries = ports.map((p) => `(timeout ${timeoutS} bash -c 'exec 3<>/dev/tcp/${address}/${p}' 2>/dev/null && echo ${p}) &`);
  const out = network.exec(host, ['bash', '-c', `${tries.join(' ')} wait`]);
  return out
    .split('\n')
    .filter(Boolean)
    .map(Number)
    .sort((a, b) => a - b);
}
