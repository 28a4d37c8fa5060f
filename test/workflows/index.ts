// Every workflow the tests run or replay: the production workflows plus test-only ones.
export * from './roundtrip.js';
