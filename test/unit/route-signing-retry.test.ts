// A route whose deployment cannot be read for a moment is retried, not dropped: the routes
// workflow applies what signRoutes returns and moves on, so a refusal there (what a failed
// lookup used to become) left a Ready replica out of every router until its next change.
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { trueRoute } from '../../activities/route-signing.js';
import { ensureCatalogKeyFile, readCatalogKeys } from '../../common/catalog-key.js';
import { signPlacementTicket } from '../../common/placement-ticket.js';
import { asActivityOf, fakeReplicaClient } from '../helpers/replica-fakes.js';
import { demoTicket } from '../helpers/tickets.js';

const UNATTESTED = { trustUnenrolled: true };
const entry = { replicaId: 'replica/demo/1', deployment: 'demo', servedName: 'demo', endpoint: '', phase: 'Ready' as const };

function signedLeader(keyFile: string): unknown[] {
  const ticket = signPlacementTicket(demoTicket({ placedByRun: 'chain-a', chain: 'chain-a' }), readCatalogKeys(keyFile));
  return [{ shardId: 'demo.1.r0.a1', nodeId: 'gpu-1', rank: 0, ticket }];
}

describe('signing a route whose deployment cannot be read', () => {
  const keyFile = join(mkdtempSync(join(tmpdir(), 'llmgw-route-retry-')), 'catalog.key');
  ensureCatalogKeyFile(keyFile);
  const unreadable = () => Promise.reject(new Error('deployment/demo has not verified the state it was handed yet'));
  const validating = () => Promise.resolve({ name: 'demo', phase: 'Validating', model: 'demo', profile: 'p', revision: '' });

  it('retries the batch on its first attempts, whether the query failed or the deployment is still resolving', async () => {
    for (const query of [unreadable, validating]) {
      const client = fakeReplicaClient('chain-a', signedLeader(keyFile), query);
      await expect(asActivityOf('chain-a', () => trueRoute(client, entry, keyFile, UNATTESTED), 1)).rejects.toThrow(
        /deployment demo could not be read .*; retrying/,
      );
    }
  });

  it('refuses that route alone once the attempts are spent, saying why', async () => {
    const client = fakeReplicaClient('chain-a', signedLeader(keyFile), unreadable);
    const verdict = await asActivityOf('chain-a', () => trueRoute(client, entry, keyFile, UNATTESTED), 5);
    expect(verdict).toEqual({
      refused: expect.stringMatching(/deployment demo could not be read: deployment\/demo has not verified/),
    });
  });

  it('signs it once the deployment answers', async () => {
    const client = fakeReplicaClient('chain-a', signedLeader(keyFile));
    const verdict = await asActivityOf('chain-a', () => trueRoute(client, entry, keyFile, UNATTESTED), 1);
    expect(verdict).toMatchObject({ route: { endpoint: 'http://198.18.0.7:8000', chain: 'chain-a', signature: expect.any(String) } });
  });
});
