// Route and deployment signatures: the control worker's word that a served name may be sent to
// an endpoint, for one replica and revision, and that a deployment name stands for a served name
// (activities/route-signing.ts and deployment-signing.ts make them, from the workflows' own state).
// Routers verify both with public keys (router/routes/verify.ts), so a routeChanged or
// deploymentChanged signal, or a hand-started replica, moves no traffic. Process side.
import type { AutoscalePolicy } from './autoscale.js';
import type { SleepPolicy } from './sleep-types.js';
import type { CatalogKey, CatalogKeyring } from './catalog-key.js';
import { signStatement, verifyStatement, type SignatureVerdict } from './signature.js';

const DOMAIN = 'llmgw route v1';
const DEPLOYMENT_DOMAIN = 'llmgw deployment v1';

/**
 * What a route signature covers: the binding of a name to an endpoint, for one run chain of one
 * replica (a replica id started again is another chain). The phase is not signed.
 */
export interface SignedRouteFields {
  replicaId: string;
  deployment: string;
  servedName: string;
  endpoint: string;
  revision?: string;
  chain?: string;
  /** The chain the endpoint's engine key is derived from, when not `chain` (common/engine-keys.ts). */
  keyChain?: string;
  /** The pin of the endpoint's TLS certificate (common/engine-tls.ts), when it serves HTTPS. */
  tlsPin?: string;
  signature?: string;
}

function canonical(route: SignedRouteFields): string {
  const fields = [route.replicaId, route.deployment, route.servedName, route.endpoint, route.revision ?? '', route.chain ?? ''];
  // Only when set, so that every route signed before it existed still verifies; the pin is
  // labelled, so that it cannot be read as a key chain nor one as it.
  if (route.keyChain) fields.push(route.keyChain);
  if (route.tlsPin) fields.push(`tls:${route.tlsPin}`);
  return JSON.stringify(fields);
}

export function signRoute(route: SignedRouteFields, keyring: CatalogKeyring): string {
  return signStatement(DOMAIN, canonical(route), keyring);
}

export function verifyRoute(route: SignedRouteFields, keys: CatalogKey[]): SignatureVerdict {
  return verifyStatement(DOMAIN, canonical(route), route.signature ?? '', keys);
}

/**
 * What a deployment signature covers: everything a router acts on. The name → served name binding
 * makes the alias (a request for the deployment's name goes to its served name's replicas); the
 * phase, desired count and autoscaling decide what the router lists, holds and scales.
 */
export interface SignedDeploymentFields {
  name: string;
  servedName: string;
  model: string;
  phase: string;
  desired: number;
  autoscale?: AutoscalePolicy;
  sleep?: SleepPolicy;
  signature?: string;
}

function canonicalDeployment(d: SignedDeploymentFields): string {
  // Fields in a fixed order, not JSON.stringify of the object: key order must not change a signature.
  const a = d.autoscale;
  const autoscale = a
    ? [a.min, a.max, a.metric, a.target, a.idleToZeroSeconds ?? null, a.upAfterSeconds, a.downAfterSeconds, a.tolerance]
    : null;
  const fields: unknown[] = [d.name, d.servedName, d.model, d.phase, d.desired, autoscale];
  // Only when set, so that every entry signed before sleep existed still verifies.
  const s = d.sleep;
  if (s) fields.push(['sleep', s.afterSeconds, s.level, s.stopAfterSeconds ?? null, s.minAwakeSeconds]);
  if (a?.ignoreSheddable) fields.push(['ignoreSheddable', true]);
  return JSON.stringify(fields);
}

export function signDeployment(deployment: SignedDeploymentFields, keyring: CatalogKeyring): string {
  return signStatement(DEPLOYMENT_DOMAIN, canonicalDeployment(deployment), keyring);
}

export function verifyDeployment(deployment: SignedDeploymentFields, keys: CatalogKey[]): SignatureVerdict {
  return verifyStatement(DEPLOYMENT_DOMAIN, canonicalDeployment(deployment), deployment.signature ?? '', keys);
}
