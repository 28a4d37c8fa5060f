// The agent host's admin API (Describe, TailLogs, gRPC health; agent/admin/): where it listens
// and how it is guarded. Agent side. A Unix socket (the default) is guarded by its mode 0600;
// a TCP address by the token kept in the state dir.
import { join } from 'node:path';
import type { LineLog } from '../../common/logger.js';
import type { Register } from '../../proto/gen/llmgw/v1/register_pb.js';
import { ADMIN_TOKEN_FILE, adminToken, isUnixAddress, resolveAdminAddress } from '../admin/auth.js';
import { startAdminServer, type AdminServer } from '../admin/server.js';
import type { AgentConfig } from '../config.js';
import { tailLines } from '../supervisor/logs/logs.js';
import { logPath } from '../supervisor/spec-store.js';

export async function startHostAdmin(config: AgentConfig, describe: () => Promise<Register>, log: LineLog): Promise<AdminServer> {
  const address = resolveAdminAddress(config.adminAddr, config.stateDir);
  const unix = isUnixAddress(address);
  const admin = await startAdminServer(
    address,
    { describe, logFile: (shardId) => logPath(config.stateDir, shardId), tailLines },
    unix ? undefined : adminToken(config.stateDir),
  );
  const guard = unix ? 'socket mode 0600' : `token in ${join(config.stateDir, ADMIN_TOKEN_FILE)}`;
  log(`admin API on ${admin.address} (Describe, TailLogs, gRPC health; ${guard})`);
  return admin;
}
