// The fake replica under the workflow type the router queries for (`replica`). Kept apart from
// index.ts, which also exports the real `replica`: a worker for the router's Temporal test
// bundles this file alone.
export { fakeReplica as replica } from './fake-replica.js';
