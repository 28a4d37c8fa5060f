// Only the batch workflow, for test/e2e/batch.test.ts's worker: a small bundle, quick to build.
export { batch } from '../../workflows/batch/workflow.js';
