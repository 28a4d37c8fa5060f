// The upgrade test's second build of the control worker: the production workflows with one
// change to the commands they issue — a timer before every activity — the kind of change
// (13a08bc, 64ca206, 34b87d9) that breaks a run replayed on the new code. Pinned runs of the
// first build must never see it; they move to it only at continue-as-new.
import {
  sleep,
  type ActivityInput,
  type Next,
  type WorkflowInterceptors,
  type WorkflowOutboundCallsInterceptor,
} from '@temporalio/workflow';

export * from '../../workflows/index.js';

class TimerBeforeEveryActivity implements WorkflowOutboundCallsInterceptor {
  async scheduleActivity(input: ActivityInput, next: Next<WorkflowOutboundCallsInterceptor, 'scheduleActivity'>): Promise<unknown> {
    await sleep(1);
    return next(input);
  }
}

export const interceptors = (): WorkflowInterceptors => ({ outbound: [new TimerBeforeEveryActivity()] });
