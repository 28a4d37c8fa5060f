// The weights failures a replica must tell apart, made from what the hub or the disk said:
// a refused or missing token, an unknown revision (no retry fixes them), a full disk (this
// host cannot hold it: place elsewhere). Agent side.
import { ApplicationFailure } from '@temporalio/activity';
import { FailureType } from '../../common/failures.js';
import { HUB_URL } from '@huggingface/hub';
import type { HubEndpoint } from './hub-client.js';

interface HubErrorShape {
  statusCode?: number;
  message?: string;
  code?: string;
  cause?: { code?: string; message?: string };
}

/** What a connection that got no HTTP answer says: refused, no such host, timed out, cut. */
const NETWORK_CODES = /^(ECONNREFUSED|ECONNRESET|ENOTFOUND|EAI_AGAIN|ETIMEDOUT|EHOSTUNREACH|ENETUNREACH|EPIPE|UND_ERR_\w+)$/;

export const WeightsError = {
  fromHub(error: unknown, repo: string, commit: string, endpoint: HubEndpoint): unknown {
    const status = (error as HubErrorShape | undefined)?.statusCode;
    const said = error instanceof Error ? (error.message.split('. URL:')[0] ?? '') : String(error);
    if (status === 401 || status === 403) {
      const how = endpoint.accessToken
        ? `the hub refused this host's HF_TOKEN for ${repo}: give it a token with access to ${repo}`
        : `the hub needs a token for ${repo} and this agent has none: start it with HF_TOKEN set and --pass-env HF_TOKEN`;
      return ApplicationFailure.nonRetryable(`${how} (${said})`, FailureType.WeightsUnavailable);
    }
    if (status === 404) {
      return ApplicationFailure.nonRetryable(`${repo} has no revision ${commit} on the hub (${said})`, FailureType.WeightsUnavailable);
    }
    const shape = error as HubErrorShape | undefined;
    const code = shape?.code ?? shape?.cause?.code;
    if (status === undefined && (NETWORK_CODES.test(code ?? '') || said === 'fetch failed')) {
      // Retried (the fetch resumes); the replica fails with this if the hub stays out of reach.
      return new Error(
        `cannot reach the hub at ${endpoint.hubUrl ?? HUB_URL} for ${repo}@${commit.slice(0, 12)} (${said}${code && !said.includes(code) ? `: ${code}` : ''}): start this agent with HF_ENDPOINT set to a hub it can reach (the control worker pinned the revision through its own HF_ENDPOINT)`,
      );
    }
    return error;
  },

  /** A full disk is this host's problem, not the revision's: non-retryable here, placed elsewhere. */
  fromDisk(error: unknown, weightsDir: string): unknown {
    const code = (error as NodeJS.ErrnoException | undefined)?.code;
    if (code === 'ENOSPC' || code === 'EDQUOT') return noSpace(`the disk of ${weightsDir} is full`);
    return undefined;
  },
};

export function noSpace(why: string): ApplicationFailure {
  return ApplicationFailure.nonRetryable(`no room for the weights: ${why}`, FailureType.WeightsNoSpace);
}
