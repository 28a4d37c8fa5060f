// Route signatures: the control worker's word that a served name may be sent to an endpoint, for
// one replica and revision (activities/route-signing.ts makes them, from the replica's own state
// and its placement ticket). Routers verify them with public keys (router/routes-verify.ts), so
// a routeChanged signal or a hand-started replica moves no traffic. Process side.
import type { CatalogKey, CatalogKeyring } from './catalog-key.js';
import { signStatement, verifyStatement, type SignatureVerdict } from './signature.js';

const DOMAIN = 'llmgw route v1';

/** What a route signature covers: the binding of a name to an endpoint. The phase is not signed. */
export interface SignedRouteFields {
  replicaId: string;
  deployment: string;
  servedName: string;
  endpoint: string;
  revision?: string;
  signature?: string;
}

function canonical(route: SignedRouteFields): string {
  return JSON.stringify([route.replicaId, route.deployment, route.servedName, route.endpoint, route.revision ?? '']);
}

export function signRoute(route: SignedRouteFields, keyring: CatalogKeyring): string {
  return signStatement(DOMAIN, canonical(route), keyring);
}

export function verifyRoute(route: SignedRouteFields, keys: CatalogKey[]): SignatureVerdict {
  return verifyStatement(DOMAIN, canonical(route), route.signature ?? '', keys);
}
