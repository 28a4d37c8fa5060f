// Every llmgw workflow, for the control worker's bundle and the replay test.
export { node } from './node/workflow.js';
export { replica } from './replica/workflow.js';
export { deployModel } from './deploy-model/workflow.js';
export { reconcileNode } from './reconcile/workflow.js';
export { routes } from './routes/workflow.js';
export { weightsPrefetch } from './weights/prefetch.js';
export { weightsRemove } from './weights/remove.js';
export { batch } from './batch/workflow.js';
