// Every workflow the tests run or replay: the production workflows plus test-only ones.
export * from '../../workflows/index.js';
export * from './roundtrip.js';
export * from './agent-calls.js';
export * from './fake-replica.js';
export * from './forge-replica.js';
