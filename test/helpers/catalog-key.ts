// The catalog key pair of a test run: made by the global setup, the private file given to every
// control worker the harness starts (LLMGW_CATALOG_KEY_FILE) and the public one to every agent
// and router (LLMGW_CATALOG_PUBLIC_KEY_FILE); used here to sign the revisions and placement
// tickets tests hand to agents directly, as the control worker signs what it resolves and places.
import { inject } from 'vitest';
import { signedNodeRequest } from '../../activities/node-requests.js';
import type { ReleaseRequest } from '../../common/node-types.js';
import { publicKeyFileOf, readCatalogKeys } from '../../common/catalog-key.js';
import { signPlacementTicket, verifyPlacementTicket, type PlacementTicket } from '../../common/placement-ticket.js';
import { signRevision } from '../../common/revision-signature.js';
import type { EngineProfile, StartShard } from '../../proto/gen/llmgw/v1/shard_pb.js';

/** The control worker's (private) key file of this run. */
export function testCatalogKeyFile(): string {
  const file = inject('catalogKeyFile');
  if (!file) throw new Error('no catalog key: run tests through vitest (test/setup/global-setup.ts makes one)');
  return file;
}

/** The public key file agents and routers of this run verify with. */
export function testPublicKeyFile(): string {
  return publicKeyFileOf(testCatalogKeyFile());
}

/** Signs `profile` in place with the test key, and returns it. */
export function signWithTestKey(profile: EngineProfile): EngineProfile {
  profile.signature = '';
  profile.signature = signRevision(profile, readCatalogKeys(testCatalogKeyFile()));
  return profile;
}

/**
 * The ticket placement would sign for exactly this start (sent by its replica's workflow), issued
 * now. Its run chain is left '' until the workflow that sends it has started: useCallWorker's
 * call() binds it then (bindTicket), as placement names the chain that asked.
 */
export function ticketFor(spec: StartShard): PlacementTicket {
  return {
    replicaId: spec.replicaId,
    placedByRun: '',
    chain: '',
    issuedAt: Date.now(),
    shardId: spec.shardId,
    nodeId: spec.nodeId,
    rank: spec.rank,
    nnodes: spec.nnodes,
    gpus: [...spec.gpuIndices],
    hcas: [...spec.hcas],
    httpPort: spec.httpPort,
    leaderAddress: spec.leaderAddress,
    leaderNode: spec.leaderAddress === '' ? '' : spec.nodeId,
    revision: spec.profile?.signature ?? '',
    address: '127.0.0.1',
    deployment: spec.deployment,
    servedName: spec.profile?.servedName ?? '',
    peers: spec.nnodes > 1 ? Array.from({ length: spec.nnodes }, () => '127.0.0.1') : [],
  };
}

/** Gives `spec` the control worker's ticket for what it says (or for `ticket`), and returns it. */
export function placeWithTestKey(spec: StartShard, ticket: PlacementTicket = ticketFor(spec)): StartShard {
  spec.placementTicket = signPlacementTicket(ticket, readCatalogKeys(testCatalogKeyFile()));
  return spec;
}

/** The ticket `spec` carries, read back (undefined if it carries none that verifies). */
export function ticketOf(spec: StartShard): PlacementTicket | undefined {
  const verdict = verifyPlacementTicket(spec.placementTicket, readCatalogKeys(testCatalogKeyFile()).all);
  return verdict.ok ? verdict.ticket : undefined;
}

/**
 * `spec` with its ticket signed again for run chain `chain` when it names none yet (the rest,
 * issue time included, as it was); any other spec as it is.
 */
export function bindTicket(spec: StartShard, chain: string): StartShard {
  const ticket = ticketOf(spec);
  if (!ticket || ticket.chain !== '') return spec;
  return { ...spec, placementTicket: signPlacementTicket({ ...ticket, chain }, readCatalogKeys(testCatalogKeyFile())) };
}

/** A release of `shardId` on node `nodeId` with the control worker's MAC, as releaseGpus sends it. */
export function signedRelease(nodeId: string, shardId: string): ReleaseRequest {
  return signedNodeRequest(testCatalogKeyFile(), nodeId, 'release', { shardId });
}
