// The router installs a routable entry only with the control worker's signature over its name,
// endpoint, replica and revision, and a deployment (whose name becomes an alias of its served
// name) only with its signature over the whole entry (common/route-signature.ts), checked with
// the public keys in --catalog-key. Router side: it wraps the Temporal route source, so a
// routeChanged or deploymentChanged signal from anyone else, a hand-started replica's memo or a
// forged table moves no traffic.
import { readVerifyingKeys } from '../../common/catalog-key.js';
import { verifyDeployment, verifyRoute } from '../../common/route-signature.js';
import { isRoutable, type RouteSnapshot, type RouteSource } from './table.js';

const WHY = {
  unsigned: 'unsigned',
  malformed: 'signed in a form the control worker does not make',
  'unknown-key': 'signed with a key not in the key file',
  mismatch: 'not what the control worker signed (changed since it was signed)',
} as const;

export class VerifiedRouteSource implements RouteSource {
  readonly description: string;
  readonly longPoll?: boolean;
  /** What was refused and logged already (replica and endpoint): said once, not every poll. */
  private readonly refused = new Set<string>();

  constructor(
    private readonly inner: RouteSource,
    private readonly keyFile: string,
    private readonly log: (line: string) => void,
  ) {
    this.description = inner.description;
    if (inner.longPoll !== undefined) this.longPoll = inner.longPoll;
    // A key file that cannot be read, or that holds a private key, stops the router now.
    readVerifyingKeys(keyFile);
  }

  async fetch(): Promise<RouteSnapshot> {
    const snapshot = await this.inner.fetch();
    // Read on every table, so a rotated key file needs no restart.
    const keys = readVerifyingKeys(this.keyFile).all;
    const routes = snapshot.routes.filter((route) => {
      // A sleeping route is checked too: a forged one would have this router send wakes.
      if ((!isRoutable(route.phase) && route.phase !== 'Sleeping') || route.endpoint === '') return true;
      const verdict = verifyRoute(route, keys);
      if (verdict.ok) return true;
      const key = `${route.replicaId} ${route.endpoint}`;
      if (!this.refused.has(key)) {
        this.refused.add(key);
        this.log(
          `router: not routing ${route.servedName} to ${route.replicaId}: its route is ${WHY[verdict.why]} (only routes the control worker signed are installed)`,
        );
      }
      return false;
    });
    const deployments = snapshot.deployments.filter((deployment) => {
      const verdict = verifyDeployment(deployment, keys);
      if (verdict.ok) return true;
      const key = `deployment ${deployment.name} ${deployment.servedName} ${deployment.signature ?? ''}`;
      if (!this.refused.has(key)) {
        this.refused.add(key);
        this.log(
          `router: not listing deployment ${deployment.name} (as ${deployment.servedName}): its entry is ${WHY[verdict.why]} (only deployments the control worker signed are listed or aliased)`,
        );
      }
      return false;
    });
    return { ...snapshot, routes, deployments };
  }

  installed(version: number | undefined): void {
    this.inner.installed?.(version);
  }

  temporalClient(): Promise<import('@temporalio/client').Client> {
    if (!this.inner.temporalClient) throw new Error('this route source has no Temporal client');
    return this.inner.temporalClient();
  }

  close(): Promise<void> {
    return this.inner.close();
  }
}
