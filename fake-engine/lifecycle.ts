// A fake engine's readiness: loaded yet, every rank of a multi-node group joined, told to turn
// unhealthy, shutting down. Engine side; server.ts drives it, http.ts reads it per request.
import type { FakeEngineOptions } from './options.js';
import type { RendezvousLeader, RendezvousWorker } from './rendezvous.js';

/**
 * `loading`: not loaded yet, or (multi-node) not every worker has joined: /health 503.
 * `ready`: /health 200. `group-broken`: a worker left after the group formed: 503 for good.
 * `unhealthy`: --unhealthy-after passed: /health 500 (inference still answers).
 */
export type EngineState = 'loading' | 'ready' | 'group-broken' | 'unhealthy';

export class EngineLifecycle {
  loaded = false;
  unhealthy = false;
  closing = false;
  leader: RendezvousLeader | undefined;
  worker: RendezvousWorker | undefined;
  private announcedReady = false;

  constructor(
    private readonly opts: FakeEngineOptions,
    private readonly log: (line: string) => void,
  ) {}

  get isWorker(): boolean {
    return this.opts.nodeRank > 0;
  }

  /** Whether inference, /v1/models and the adapter routes answer now. */
  canServe(): boolean {
    return this.loaded && !this.closing && this.groupWhole();
  }

  state(): EngineState {
    if (this.unhealthy) return 'unhealthy';
    if (this.leader?.broken()) return 'group-broken';
    return this.loaded && this.groupWhole() ? 'ready' : 'loading';
  }

  markLoaded(): void {
    this.loaded = true;
    this.announce();
  }

  /** Logs "loaded" once, when the engine is loaded and its group is whole, whichever comes last. */
  announce(): void {
    if (this.announcedReady || !this.loaded || !this.groupWhole()) return;
    this.announcedReady = true;
    const opts = this.opts;
    this.log(
      this.isWorker
        ? `fake-engine: rank ${opts.nodeRank} loaded and joined`
        : `fake-engine: loaded ${opts.model}; serving as ${opts.servedModelNames.join(', ')}`,
    );
  }

  private groupWhole(): boolean {
    const { leader, worker } = this;
    return (leader ? leader.complete() && !leader.broken() : true) && (worker ? worker.joined() : true);
  }
}

export function healthStatus(state: EngineState): number {
  switch (state) {
    case 'ready':
      return 200;
    case 'loading':
    case 'group-broken':
      return 503;
    case 'unhealthy':
      return 500;
  }
}
