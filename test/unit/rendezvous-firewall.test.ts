// The agent's rendezvous rules (agent/host/rendezvous-firewall.ts): what the nft script says, that
// nft accepts it (checked with `nft -c`, which changes nothing; root only), and that an agent
// without nft or root warns once and carries on. The rules at work: test/e2e/net-ray.test.ts.
import { execFileSync } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import { createRendezvousFirewall, renderRules, tableName } from '../../agent/host/rendezvous-firewall.js';

const opening = {
  replicaId: 'replica/big/3',
  shardId: 'big-3-r0-1',
  // The head's rendezvous port, and the shard's block of Ray ports.
  ports: [
    { from: 30007, to: 30007 },
    { from: 10256, to: 10511 },
  ],
  peers: ['198.18.4.10', '198.18.4.11', 'fd00::11'],
};

function nftChecks(): boolean {
  if (process.getuid?.() !== 0) return false;
  try {
    execFileSync('nft', ['--version'], { stdio: 'pipe' });
    return true;
  } catch {
    return false;
  }
}

describe('rendezvous firewall rules', () => {
  it("drop a rendezvous port for everyone but the placement's peers, in the agent's own table", () => {
    const table = tableName('gpu-07.example');
    expect(table).toMatch(/^llmgw_gpu_07_example_[0-9a-f]{6}$/);
    expect(tableName('gpu-07.example')).not.toBe(tableName('gpu_07_example'));
    const script = renderRules(table, [opening]);
    // Sorted, so one opening's set reads the same whatever order its ports came in.
    expect(script).toContain(`tcp dport { 10256-10511, 30007 } ip saddr { 198.18.4.10, 198.18.4.11 } accept`);
    expect(script).toContain(`tcp dport { 10256-10511, 30007 } ip6 saddr { fd00::11 } accept`);
    expect(script).toContain(`tcp dport { 10256-10511, 30007 } counter drop`);
    // Only its own table: nothing else on the host is named.
    expect([...script.matchAll(/table inet (\S+)/g)].every((m) => m[1] === table)).toBe(true);
    // The accept of the peers comes before the drop.
    expect(script.indexOf('accept comment')).toBeLessThan(script.indexOf('drop'));
    // Nothing to guard: the table is removed (made first, so the delete holds when it is absent).
    expect(renderRules(table, [])).toBe(`table inet ${table} {}\ndelete table inet ${table}\n`);
  });

  it.skipIf(!nftChecks())('are a script nft accepts (nft -c: checked, not applied)', () => {
    for (const openings of [[opening], [], [{ ...opening, replicaId: 'replica/"quote"; drop', peers: ['10.0.0.1'] }]]) {
      const script = renderRules(tableName('node-a'), openings);
      execFileSync('nft', ['-c', '-f', '-'], { input: script, stdio: ['pipe', 'pipe', 'pipe'] });
    }
  });

  it('without nft or root: one warning, and nothing applied', async () => {
    const lines: { line: string; level?: string }[] = [];
    const firewall = createRendezvousFirewall('node-a', (line, level) => lines.push({ line, level }), 'the agent is not root');
    await firewall.apply([opening]);
    await firewall.apply([]);
    expect(firewall.unavailable).toBe('the agent is not root');
    expect(lines).toEqual([{ line: expect.stringContaining('NOT firewalled: the agent is not root'), level: 'warn' }]);
  });
});
