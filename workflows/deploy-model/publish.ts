// What a deployment shows: its search attributes (LlmgwState, …), its memo (read by the CLI,
// the catalog notifier and `llmgw upgrade`) and the Web UI's current details. Published only
// when something visible changed, so a deployment that waits costs no events. Workflow side.
import type { SearchAttributeUpdatePair } from '@temporalio/common';
import { autoscalePolicy } from '../../common/autoscale.js';
import { notifyDeploymentChanged } from '../routes/notify.js';
import { SA } from '../../common/search-attributes.js';
import { createPublication } from '../publish.js';
import { deploymentDetails, deploymentPhase, deploymentView, type DeploymentState } from './state.js';

export function createDeploymentPublisher(d: DeploymentState): () => void {
  const shown = createPublication();
  let published = '';
  return () => {
    // What routers need of a deployment even at zero replicas: its name stays in /v1/models,
    // and a request for it is held and wakes it.
    const phase = deploymentPhase(d);
    const entry = {
      name: d.name,
      servedName: d.snapshot.servedName,
      model: d.model,
      phase,
      desired: d.desired,
      ...(d.autoscale ? { autoscale: autoscalePolicy(d.autoscale) } : {}),
    };
    if (shown.due('routes', JSON.stringify(entry))) notifyDeploymentChanged(entry);
    const view = deploymentView(d);
    const key = JSON.stringify([
      view.phase,
      d.desired,
      view.ready,
      view.reason,
      view.revision,
      d.catalogRevision,
      view.rollout?.steps.length,
      view.replicas.map((r) => [r.replicaId, r.phase, r.reason]),
    ]);
    if (key === published) return;
    published = key;
    const attributes = [
      { key: SA.deployment, value: d.name },
      { key: SA.model, value: d.model },
      { key: SA.state, value: deploymentPhase(d) },
      { key: SA.gpuClass, value: d.snapshot.gpuClass },
    ] satisfies SearchAttributeUpdatePair[];
    const memo = {
      deployment: {
        name: d.name,
        model: d.model,
        profile: d.snapshot.profile,
        revision: view.revision,
        // The catalog notifier compares the catalog with this pin, not with the source as written.
        ...(d.snapshot.sourceAsWritten ? { source: { written: d.snapshot.sourceAsWritten, pinned: d.snapshot.modelSource } } : {}),
        ...(d.catalogRevision ? { catalogRevision: d.catalogRevision } : {}),
        desired: d.desired,
        nextSeq: d.nextSeq,
        ...(d.rebuilt ? { rebuilt: d.rebuilt } : {}),
      },
    };
    // A replica's phase change shows in the details alone; the attributes and memo only when
    // what they hold changed.
    shown.attributes(attributes);
    shown.memo(memo);
    shown.details(deploymentDetails(view));
  };
}
