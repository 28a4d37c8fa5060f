// `npm run test:unit`: only the pure tests under test/unit. The global setup
// (test/setup/global-setup.ts) still makes the run's catalog key, which some of them sign
// with, but starts no Temporal dev server: none of these tests talks to Temporal.
import { defineConfig } from 'vitest/config';
import full from './vitest.config.mjs';

process.env.LLMGW_SKIP_TEMPORAL = '1';

export default defineConfig({
  test: {
    ...full.test,
    include: ['test/unit/**/*.test.ts'],
  },
});
