// The engine supervisor's files: /proc stat parsing, engine logs bounded by copy-truncate and
// tailed, and the logs and corrupt specs of stopped shards deleted after the retention.
import { existsSync, readFileSync, utimesSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { enforceLogLimit, tailLines } from '../../agent/supervisor/logs/logs.js';
import { parseStat, readStat } from '../../common/proc-stat.js';
import { logPath } from '../../agent/supervisor/spec-store.js';
import { agentHost, fakeSpec, tempDir, useSupervisorHarness } from '../helpers/supervisor.js';

useSupervisorHarness();

describe('helpers', () => {
  it('reads /proc stat fields after the last parenthesis of the command name', () => {
    const line = '1234 (we ird) (name)) S 1 1234 1234 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 10';
    expect(parseStat(1234, line)).toEqual({ pid: 1234, state: 'S', ppid: 1, pgrp: 1234, startTicks: '987654' });
    expect(readStat(process.pid)?.pid).toBe(process.pid);
  });

  it('bounds a log by copy-truncate and tails its last lines', async () => {
    const file = join(tempDir(), 'x.log');
    writeFileSync(file, Array.from({ length: 100 }, (_, i) => `line ${i}`).join('\n') + '\n');
    expect(tailLines(file, 3)).toEqual(['line 97', 'line 98', 'line 99']);
    expect(await enforceLogLimit(file, 100)).toBe(true);
    expect(readFileSync(file, 'utf8')).toBe('');
    expect(tailLines(`${file}.1`, 1)).toEqual(['line 99']);
  });
});

describe('engine log retention', () => {
  it('deletes the logs and corrupt specs of stopped shards once older than the retention, and keeps a running shard’s', async () => {
    const { node, stateDir, startAgent } = await agentHost('retention');
    const first = startAgent();
    await first.sup.start(fakeSpec(node, 'demo.50.r0.a1', []));
    first.sup.close();
    const logs = join(stateDir, 'logs');
    const shards = join(stateDir, 'shards');
    const old = ['gone.1.r0.a1.log', 'gone.1.r0.a1.log.1'].map((name) => join(logs, name));
    const corrupt = join(shards, 'gone.2.r0.a1.json.corrupt');
    const recent = join(logs, 'gone.3.r0.a1.log');
    for (const file of [...old, corrupt, recent]) writeFileSync(file, 'x\n');
    const eightDaysAgo = new Date(Date.now() - 8 * 86_400_000);
    for (const file of [...old, corrupt, logPath(stateDir, 'demo.50.r0.a1')]) utimesSync(file, eightDaysAgo, eightDaysAgo);

    const second = startAgent({ logRetentionMs: 7 * 86_400_000 });
    expect((await second.sup.recover()).adopted).toHaveLength(1);
    for (const file of [...old, corrupt]) expect(existsSync(file), file).toBe(false);
    expect(existsSync(recent)).toBe(true);
    // Later sweeps (on a timer) find what has aged since.
    utimesSync(recent, eightDaysAgo, eightDaysAgo);
    expect(await second.sup.sweepOldFiles()).toEqual([recent]);
    // The running (adopted) shard keeps its log however old.
    expect(existsSync(logPath(stateDir, 'demo.50.r0.a1'))).toBe(true);
    expect(second.logs).toContainEqual(expect.stringMatching(/deleted 3 file\(s\) of stopped shards older than 7 day\(s\)/));
  });
});
