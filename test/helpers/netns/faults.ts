// Network faults for the namespaced hosts of network.ts, made by the kernel rather than by
// killing processes: a host's link down, and nftables rules inside a host's namespace that cut
// one kind of traffic while the rest flows. Rules live in the namespace, so they go with it.
import { execFileSync } from 'node:child_process';
import type { NetHost, Network } from './network.js';

const TABLE = 'llmgw_fault';

/** The whole host drops off the network (a dead switch port): its processes keep running. */
export function cutHost(host: NetHost): void {
  execFileSync('ip', ['link', 'set', host.hostLink, 'down']);
}

export function restoreHost(host: NetHost): void {
  execFileSync('ip', ['link', 'set', host.hostLink, 'up']);
}

function nft(network: Network, host: NetHost, script: string): void {
  execFileSync('ip', ['netns', 'exec', host.ns, 'nft', '-f', '-'], { input: script, stdio: ['pipe', 'pipe', 'pipe'] });
}

/**
 * Drops both ways, inside the host's namespace, every connection that `opener` opens across the
 * bridge: the packets it sends out in the connection's original direction and the replies that
 * come back. Told apart by conntrack's direction, not by port, so the cut does not depend on
 * which ports Temporal or the engines chose; connections the other side opens still flow.
 */
function cutConnectionsOpenedBy(opener: 'host' | 'gateway', network: Network, host: NetHost): void {
  const [outgoing, incoming] = opener === 'host' ? ['original', 'reply'] : ['reply', 'original'];
  nft(
    network,
    host,
    `table inet ${TABLE} {
      chain out { type filter hook output priority 0; ct direction ${outgoing} ip daddr ${network.gateway} drop; }
      chain in { type filter hook input priority 0; ct direction ${incoming} ip saddr ${network.gateway} drop; }
    }`,
  );
}

/**
 * Connections the host opens to the control plane's side of the bridge (Temporal, or the fault
 * proxy in front of it) are dropped; connections opened from there to the host (the router to its
 * engines) still flow.
 */
export function cutFromControlPlane(network: Network, host: NetHost): void {
  cutConnectionsOpenedBy('host', network, host);
}

/** The reverse: the router cannot reach the host's engines, while the agent still reaches Temporal. */
export function cutFromRouter(network: Network, host: NetHost): void {
  cutConnectionsOpenedBy('gateway', network, host);
}

/** Ends any cut made with nftables on this host. */
export function healCuts(network: Network, host: NetHost): void {
  try {
    execFileSync('ip', ['netns', 'exec', host.ns, 'nft', 'delete', 'table', 'inet', TABLE], { stdio: 'pipe' });
  } catch {
    // No cut.
  }
}
