// Only the batch workflow, for the worker of `npm run bench:batch`: a small bundle, quick to build.
export { batch } from '../workflows/batch/workflow.js';
