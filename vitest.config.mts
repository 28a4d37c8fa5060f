// Test configuration: one real Temporal dev server for the whole run (test/setup/global-setup.ts),
// tests run in forked processes so that each can spawn and reap real agents and engines.
import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    globalSetup: ['test/setup/global-setup.ts'],
    pool: 'forks',
    maxWorkers: 2,
    testTimeout: 120_000,
    hookTimeout: 180_000,
    reporters: ['default', './test/setup/skip-summary.ts'],
  },
});
