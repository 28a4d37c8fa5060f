// What a deployment shows: its search attributes (LlmgwState, …), its memo (read by the CLI,
// the catalog notifier and `llmgw upgrade`) and the Web UI's current details. Published only
// when something visible changed, so a deployment that waits costs no events. Workflow side.
import type { SearchAttributeUpdatePair } from '@temporalio/common';
import { autoscalePolicy } from '../../common/autoscale.js';
import { notifyDeploymentChanged } from '../routes/notify.js';
import type { SignalsInFlight } from '../signals-in-flight.js';
import { SA } from '../../common/search-attributes.js';
import { createPublication } from '../publish.js';
import { deploymentDetails, deploymentPhase, deploymentView, type DeploymentState } from './state.js';

export function createDeploymentPublisher(deployment: DeploymentState, routesInFlight: SignalsInFlight): () => void {
  const shown = createPublication();
  let published = '';
  return () => {
    // What routers need of a deployment even at zero replicas: its name stays in /v1/models,
    // and a request for it is held and wakes it.
    const phase = deploymentPhase(deployment);
    const entry = {
      name: deployment.name,
      servedName: deployment.snapshot.servedName,
      model: deployment.model,
      phase,
      desired: deployment.desired,
      ...(deployment.autoscale ? { autoscale: autoscalePolicy(deployment.autoscale) } : {}),
      // Routers put its idle replicas to sleep by this (router/autoscale/idle-sleep.ts).
      ...(deployment.snapshot.sleep ? { sleep: deployment.snapshot.sleep } : {}),
    };
    if (shown.due('routes', JSON.stringify(entry))) notifyDeploymentChanged(entry, routesInFlight);
    const view = deploymentView(deployment);
    const key = JSON.stringify([
      view.phase,
      deployment.desired,
      view.ready,
      view.reason,
      view.revision,
      deployment.catalogRevision,
      view.rollout?.steps.length,
      view.replicas.map((r) => [r.replicaId, r.phase, r.reason]),
    ]);
    if (key === published) return;
    published = key;
    const attributes = [
      { key: SA.deployment, value: deployment.name },
      { key: SA.model, value: deployment.model },
      { key: SA.state, value: deploymentPhase(deployment) },
      { key: SA.gpuClass, value: deployment.snapshot.gpuClass },
    ] satisfies SearchAttributeUpdatePair[];
    const memo = {
      deployment: {
        name: deployment.name,
        model: deployment.model,
        profile: deployment.snapshot.profile,
        revision: view.revision,
        // The catalog notifier compares the catalog with this pin, not with the source as written.
        ...(deployment.snapshot.sourceAsWritten
          ? { source: { written: deployment.snapshot.sourceAsWritten, pinned: deployment.snapshot.modelSource } }
          : {}),
        ...(deployment.catalogRevision ? { catalogRevision: deployment.catalogRevision } : {}),
        desired: deployment.desired,
        nextSeq: deployment.nextSeq,
        ...(deployment.rebuilt ? { rebuilt: deployment.rebuilt } : {}),
      },
    };
    // A replica's phase change shows in the details alone; the attributes and memo only when
    // what they hold changed.
    shown.attributes(attributes);
    shown.memo(memo);
    shown.details(deploymentDetails(view));
  };
}
