// The agent's nftables rules for multi-node rendezvous: rank 0's Ray head (GCS) port or SGLang's
// --dist-init-addr span, and every rank's block of Ray ports (raylet, object manager, agents,
// workers), accept connections only from the placement's peer hosts. Agent side; the supervisor
// says which ports and peers (supervisor/start/rendezvous.ts), this file owns nft.
//
// Each agent keeps one table of its own, `inet llmgw_<node>_<hash>`, and rewrites it whole in
// one nft transaction: several agents can share a network namespace (`llmgw up`, sim fleets,
// tests), and none may drop another's rules; other tables (the host's own firewall) are never
// read or touched. With nothing to guard the table is deleted, so a host without multi-node
// replicas carries no llmgw rules at all. The rules only narrow: their chain's policy is accept,
// and a drop elsewhere on the host still wins.
import { execFileSync, spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { isIPv4, isIPv6 } from 'node:net';
import type { LineLog } from '../../common/logger.js';
import { spanText, type RendezvousOpening } from '../supervisor/start/rendezvous.js';

const NFT_TIMEOUT_MS = 10_000;

export interface RendezvousFirewall {
  /** Makes the rules exactly these openings (none: the table is removed). Throws when nft fails. */
  apply(openings: RendezvousOpening[]): Promise<void>;
  /** Why no rules are made here (no nft, not root), or undefined when they are. */
  readonly unavailable: string | undefined;
  /** The table's name, for logs and docs. */
  readonly table: string;
}

/** `llmgw_<node id, made an nft identifier>_<6 hex of its hash>`: readable, and one per agent. */
export function tableName(nodeId: string): string {
  const readable = nodeId.replace(/[^A-Za-z0-9_]/g, '_').slice(0, 32);
  const hash = createHash('sha256').update(nodeId).digest('hex').slice(0, 6);
  return `llmgw_${readable}_${hash}`;
}

/** nft comments are quoted strings: only characters that need no escaping, at most 100 of them. */
function comment(text: string): string {
  return `"${text.replace(/[^A-Za-z0-9_./:@ -]/g, '_').slice(0, 100)}"`;
}

/** The nft script that makes `table` hold exactly `openings` (pure; the unit of the tests). */
export function renderRules(table: string, openings: RendezvousOpening[]): string {
  // Creating it first makes the delete succeed whether or not a previous agent left one.
  const lines = [`table inet ${table} {}`, `delete table inet ${table}`];
  if (openings.length === 0) return `${lines.join('\n')}\n`;
  lines.push(`table inet ${table} {`, '  chain rendezvous {', '    type filter hook input priority filter - 5; policy accept;');
  // The host's own engines and the agent's `ray status` reach the ports over loopback.
  lines.push('    iifname "lo" accept');
  const first = (o: RendezvousOpening): number => Math.min(...o.ports.map((p) => p.from));
  for (const o of [...openings].filter((o) => o.ports.length > 0).sort((a, b) => first(a) - first(b))) {
    const v4 = o.peers.filter((p) => isIPv4(p));
    const v6 = o.peers.filter((p) => isIPv6(p));
    const why = comment(`${o.replicaId} ${o.shardId}`);
    // One anonymous set per shard: `{ 30007, 10256-10511 }` (nft takes ranges in a set).
    const ports = `{ ${spanText([...o.ports].sort((a, b) => a.from - b.from))} }`;
    if (v4.length) lines.push(`    tcp dport ${ports} ip saddr { ${v4.join(', ')} } accept comment ${why}`);
    if (v6.length) lines.push(`    tcp dport ${ports} ip6 saddr { ${v6.join(', ')} } accept comment ${why}`);
    lines.push(`    tcp dport ${ports} counter drop comment ${why}`);
  }
  lines.push('  }', '}');
  return `${lines.join('\n')}\n`;
}

/** Why this process cannot manage `table`, or undefined when it can (root, and nft takes our script). */
function probe(table: string): string | undefined {
  if (process.platform !== 'linux') return 'nftables needs Linux';
  if (process.getuid?.() !== 0) return 'the agent is not root';
  try {
    // `-c`: the kernel checks the transaction and applies nothing.
    execFileSync('nft', ['-c', '-f', '-'], { input: renderRules(table, []), stdio: 'pipe', timeout: NFT_TIMEOUT_MS });
    return undefined;
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    return code === 'ENOENT' ? 'the nft command is not installed' : `nft does not work here: ${String(error).split('\n')[0]}`;
  }
}

function runNft(script: string): Promise<void> {
  return new Promise((resolve, reject) => {
    const child = spawn('nft', ['-f', '-'], { stdio: ['pipe', 'ignore', 'pipe'], timeout: NFT_TIMEOUT_MS });
    let stderr = '';
    child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString('utf8')));
    child.on('error', reject);
    child.on('close', (code) => (code === 0 ? resolve() : reject(new Error(`nft -f failed (${code ?? 'killed'}): ${stderr.trim()}`))));
    child.stdin.end(script);
  });
}

/**
 * The agent's firewall for `nodeId`. Without nft or root it logs one warning now and applies
 * nothing afterwards: rendezvous ports then accept anyone who reaches the host, as before.
 */
export function createRendezvousFirewall(nodeId: string, log: LineLog, unavailable?: string): RendezvousFirewall {
  const table = tableName(nodeId);
  const why = unavailable ?? probe(table);
  if (why !== undefined) {
    log(`rendezvous ports of multi-node replicas are NOT firewalled: ${why} (see docs/host-safety.md)`, 'warn');
  }
  let applied: string | undefined;
  return {
    table,
    unavailable: why,
    async apply(openings) {
      if (why !== undefined) return;
      const script = renderRules(table, openings);
      // Level-triggered: the same openings again write nothing.
      if (script === applied) return;
      const before = applied;
      await runNft(script);
      applied = script;
      const ports = openings.map((o) => `${spanText(o.ports)} (${o.peers.join(', ')})`).join('; ');
      if (openings.length) log(`nft table inet ${table}: rendezvous and Ray port(s) ${ports} open to peers only`);
      else if (before !== undefined) log(`nft table inet ${table}: removed, no rendezvous port to guard`);
    },
  };
}
