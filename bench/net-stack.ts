// The stack bench:faults runs on: hosts as network namespaces on a bridge (test/helpers/netns),
// an agent inside each advertising its host's address, each agent's path to Temporal through a
// Toxiproxy on the bridge (a path per host), and Temporal, one control worker and a router
// outside. The agents run with llmgw's default timings (lost grace, presence, liveness). Root only.
import type { ChildProcess } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Client } from '@temporalio/client';
import { findFreePort } from '../common/ports.js';
import { createNetwork, type NetHost, type Network } from '../test/helpers/netns/network.js';
import { startToxiproxy, type ProxyPath, type Toxiproxy } from '../test/helpers/netns/toxiproxy.js';
import { BENCH_CATALOG, connectClient, spawnPart, stackEnv, startTemporal, stopParts } from './stack.js';

export interface NetStack {
  network: Network;
  toxiproxy: Toxiproxy;
  client: Client;
  hosts: { host: NetHost; nodeId: string; path: ProxyPath }[];
  nodeIds: string[];
  routerUrl: string;
  llmgw(args: string[]): Promise<number | null>;
  stop(): Promise<void>;
}

export async function startNetStack(options: { hosts: number }): Promise<NetStack> {
  const network = createNetwork(options.hosts);
  const children: ChildProcess[] = [];
  const temporal = await startTemporal('dev');
  const env = stackEnv(temporal);
  const toxiproxy = await startToxiproxy(network.gateway, temporal.address);
  await spawnPart(children, ['worker', '--catalog', BENCH_CATALOG], env, /serving task queue llmgw/);
  const hosts: NetStack['hosts'] = [];
  for (const [i, host] of network.hosts.entries()) hosts.push({ host, nodeId: `net-${i}`, path: await toxiproxy.addPath(`agent-${i}`) });
  await Promise.all(
    hosts.map(({ host, nodeId, path }, i) => {
      const range = `${41000 + i * 100}-${41000 + i * 100 + 99}`;
      const stateDir = mkdtempSync(join(tmpdir(), `llmgw-${nodeId}-`));
      const args = ['agent', '--node-id', nodeId, '--gpus', 'builtin:h100x8', '--state-dir', stateDir, '--port-range', range];
      return spawnPart(
        children,
        [...args, '--advertise-addr', host.address],
        { ...env, TEMPORAL_ADDRESS: path.listen },
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
      await stopParts(children, nodeIds);
      await toxiproxy.stop();
      await temporal.stop();
      network.destroy();
    },
  };
}
