// The agent's word on where a shard's engine listens: waitHealthy's answer carries an endpoint
// attestation signed with the agent's own key (common/endpoint-attestation.ts), for the replica
// workflow that asked and its run chain as Temporal describes the caller. The port travels in
// Temporal unsigned otherwise (startShard's result, the replica's state), and anyone who can
// complete an activity on `agent/<node>` could name another. Agent side.
import { Context } from '@temporalio/activity';
import type { Client } from '@temporalio/client';
import { AGENT_KEY_FILE, type AgentIdentity } from '../common/agent-identity.js';
import { RENDEZVOUS_DOMAIN, signEndpointAttestation } from '../common/endpoint-attestation.js';
import { readPlacementTicket } from '../common/placement-ticket.js';
import type { LineLog } from '../common/logger.js';
import type { RunningShard, ShardStatus } from '../proto/gen/llmgw/v1/shard_pb.js';

export type EndpointAttester = (status: ShardStatus) => Promise<ShardStatus>;

/** The workflow execution whose activity this is (undefined outside an activity). */
function callingExecution(): { workflowId: string; runId: string } | undefined {
  try {
    return Context.current().info.workflowExecution;
  } catch {
    return undefined;
  }
}

/**
 * `status` with an attestation of its endpoint when it serves HTTP and was asked for by the
 * replica workflow its spec names; otherwise as it is (the route signer then routes nothing to
 * it, which is the point: the agent vouches only for its own replica's caller).
 */
export function createEndpointAttester(
  identity: AgentIdentity,
  facts: {
    nodeId: string;
    address: string;
    client: () => Client | undefined;
    /** The pin of the certificate a shard's engine serves HTTPS with (--engine-tls), if it does. */
    tlsFingerprint?: (shardId: string) => string | undefined;
  },
  log: LineLog,
): EndpointAttester {
  const keyring = { file: AGENT_KEY_FILE, signing: identity.key, all: [identity.key] };
  return async (status) => {
    const execution = callingExecution();
    const client = facts.client();
    if (status.endpoint === '' || status.httpPort === 0 || !execution || !client) return status;
    if (execution.workflowId !== status.replicaId) {
      log(`not attesting shard ${status.shardId}'s endpoint to ${execution.workflowId}: it belongs to ${status.replicaId}`);
      return status;
    }
    const description = await client.workflow.getHandle(execution.workflowId, execution.runId).describe();
    const chain = description.raw.workflowExecutionInfo?.firstRunId || execution.runId;
    const tlsFingerprint = facts.tlsFingerprint?.(status.shardId);
    const endpointAttestation = signEndpointAttestation(
      {
        nodeId: facts.nodeId,
        replicaId: status.replicaId,
        chain,
        shardId: status.shardId,
        address: facts.address,
        port: status.httpPort,
        issuedAt: Date.now(),
        ...(tlsFingerprint !== undefined ? { tlsFingerprint } : {}),
      },
      keyring,
    );
    return { ...status, endpointAttestation };
  };
}

export type RendezvousAttester = (running: RunningShard) => RunningShard;

/**
 * Rank 0's answer to startShard with its agent's signature over the rendezvous address and port
 * it chose, for the replica and chain its ticket names (which the start was just checked
 * against). The port goes from here to the worker ranks through the replica's workflow, where
 * anyone who completes startShard could name another; a ticket that names the leader's key makes
 * the worker ranks' agents join only the port signed here. Without such a ticket: as it is.
 */
export function createRendezvousAttester(identity: AgentIdentity, facts: { nodeId: string; address: string }): RendezvousAttester {
  const keyring = { file: AGENT_KEY_FILE, signing: identity.key, all: [identity.key] };
  return (running) => {
    const { spec, status } = running;
    if (!spec || !status || spec.rank !== 0 || spec.nnodes < 2) return running;
    const ticket = readPlacementTicket(spec.placementTicket);
    const port = status.leaderPort || spec.leaderPort;
    if (!ticket?.leaderKey || port === 0) return running;
    const leaderAttestation = signEndpointAttestation(
      {
        nodeId: facts.nodeId,
        replicaId: spec.replicaId,
        chain: ticket.chain,
        shardId: spec.shardId,
        address: facts.address,
        port,
        issuedAt: Date.now(),
      },
      keyring,
      RENDEZVOUS_DOMAIN,
    );
    return { ...running, status: { ...status, leaderAttestation } };
  };
}
