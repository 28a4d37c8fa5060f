// The stack bench:faults runs on: hosts as network namespaces on a bridge (test/helpers/netns),
// an agent inside each advertising its host's address, the agents' path to Temporal through a
// Toxiproxy on the bridge, and Temporal, one control worker and a router outside. Root only.
import type { ChildProcess } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Client } from '@temporalio/client';
import { findFreePort } from '../common/ports.js';
import { signalGroup } from '../agent/supervisor/proc.js';
import { killMarkedEngines } from '../agent/supervisor/markers.js';
import { createNetwork, type NetHost, type Network } from '../test/helpers/netns/network.js';
import { startToxiproxy, type Toxiproxy } from '../test/helpers/netns/toxiproxy.js';
import { BENCH_CATALOG, connectClient, spawnPart, stackEnv, startTemporal } from './stack.js';

export interface NetStack {
  network: Network;
  toxiproxy: Toxiproxy;
  client: Client;
  hosts: { host: NetHost; nodeId: string }[];
  nodeIds: string[];
  routerUrl: string;
  llmgw(args: string[]): Promise<number | null>;
  stop(): Promise<void>;
}

export async function startNetStack(options: { hosts: number; lostGraceSeconds: number }): Promise<NetStack> {
  const network = createNetwork(options.hosts);
  const children: ChildProcess[] = [];
  const temporal = await startTemporal('dev');
  const env = stackEnv(temporal);
  const toxiproxy = await startToxiproxy(network.gateway, temporal.address);
  await spawnPart(children, ['worker', '--catalog', BENCH_CATALOG], env, /serving task queue llmgw/);
  const hosts = network.hosts.map((host, i) => ({ host, nodeId: `net-${i}` }));
  await Promise.all(
    hosts.map(({ host, nodeId }, i) => {
      const range = `${41000 + i * 100}-${41000 + i * 100 + 99}`;
      const stateDir = mkdtempSync(join(tmpdir(), `llmgw-${nodeId}-`));
      const args = ['agent', '--node-id', nodeId, '--gpus', 'builtin:h100x8', '--state-dir', stateDir, '--port-range', range];
      const flags = [
        '--advertise-addr',
        host.address,
        '--lost-grace-seconds',
        String(options.lostGraceSeconds),
        '--presence-heartbeat-seconds',
        '5',
      ];
      return spawnPart(
        children,
        [...args, ...flags],
        { ...env, TEMPORAL_ADDRESS: toxiproxy.listen },
        /registered with node\//,
        network.inHost(host, []),
      );
    }),
  );
  const routerPort = await findFreePort();
  const admin = `127.0.0.1:${await findFreePort()}`;
  await spawnPart(
    children,
    ['router', '--port', String(routerPort), '--host', '127.0.0.1', '--admin-addr', admin, '--debug-headers'],
    env,
    /listening on http/,
  );
  const { client, connection } = await connectClient(temporal);
  const nodeIds = hosts.map((h) => h.nodeId);
  return {
    network,
    toxiproxy,
    client,
    hosts,
    nodeIds,
    routerUrl: `http://127.0.0.1:${routerPort}`,
    async llmgw(args) {
      const { spawn } = await import('node:child_process');
      const child = spawn(process.execPath, [join(__dirname, '../../bin/llmgw.js'), ...args], {
        env: { ...process.env, ...env },
        stdio: 'ignore',
      });
      return new Promise((resolve) => child.once('exit', resolve));
    },
    async stop() {
      await connection.close();
      for (const child of children) if (child.pid) signalGroup(child.pid, 'SIGTERM');
      await new Promise((r) => setTimeout(r, 3_000));
      killMarkedEngines(nodeIds);
      for (const child of children) if (child.pid) signalGroup(child.pid, 'SIGKILL');
      await toxiproxy.stop();
      await temporal.stop();
      network.destroy();
    },
  };
}
