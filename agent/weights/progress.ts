// A fetch's progress as the Web UI, `llmgw status` and `deploy --wait` show it: bytes done of
// total, the rate over the last seconds, the time left and the files in flight. One object per
// shared fetch; every replica waiting on it heartbeats its summary. Agent side.

export interface FetchProgressDetails {
  repo: string;
  commit: string;
  bytesDone: number;
  bytesTotal: number;
  filesDone: number;
  filesTotal: number;
  /** Bytes per second over the last few seconds. */
  rate: number;
  etaSeconds: number | null;
  currentFiles: string[];
  /** One line: `Fetching 37% · 1.2 GB/s · 2m left · model-00003.safetensors`. */
  summary: string;
}

const WINDOW_MS = 5_000;
const SAMPLE_MS = 100;

export class FetchProgress {
  private total = 0;
  private done = 0;
  private fetched = 0;
  private files = 0;
  private filesDone = 0;
  private readonly current = new Set<string>();
  private samples: { at: number; bytes: number }[] = [];
  /** When the first download began and the last one ended: the transfer, without listing or linking. */
  private firstStartedAt?: number;
  private lastFinishedAt?: number;

  constructor(
    readonly repo: string,
    readonly commit: string,
    private readonly now: () => number = Date.now,
  ) {}

  begin(bytesTotal: number, filesTotal: number): void {
    this.begun = true;
    this.total = bytesTotal;
    this.files = filesTotal;
    this.done = 0;
    this.filesDone = 0;
  }

  /** A file found complete on disk. */
  fileDone(size: number): void {
    this.done += size;
    this.filesDone++;
  }

  /** Bytes of a partial file kept from an earlier try. */
  resumed(bytes: number): void {
    this.done += bytes;
  }

  fileStarted(path: string): void {
    this.firstStartedAt ??= this.now();
    this.current.add(path);
  }

  fileFinished(path: string): void {
    this.lastFinishedAt = this.now();
    this.current.delete(path);
    this.filesDone++;
  }

  /**
   * Seconds from the first file's request to the last file verified and in place: the fetch's
   * throughput is bytesFetched over this (what curl given the same files does), where the
   * activity's time also holds listing the revision and linking its snapshot. 0 when nothing
   * was downloaded.
   */
  transferSeconds(): number {
    if (this.firstStartedAt === undefined || this.lastFinishedAt === undefined) return 0;
    return (this.lastFinishedAt - this.firstStartedAt) / 1000;
  }

  /**
   * Called for every chunk received (64 KB): it adds, and keeps a sample for the rate at most
   * every SAMPLE_MS rather than one per chunk (thousands a second at GB/s).
   */
  bytes(count: number): void {
    this.done += count;
    this.fetched += count;
    const at = this.now();
    const last = this.samples[this.samples.length - 1];
    if (last !== undefined && at - last.at < SAMPLE_MS) return;
    this.samples.push({ at, bytes: this.fetched });
    while (this.samples.length > 2 && this.samples[0]!.at < at - WINDOW_MS) this.samples.shift();
  }

  bytesFetched(): number {
    return this.fetched;
  }

  private begun = false;

  details(): FetchProgressDetails {
    const first = this.samples[0];
    const last = this.samples[this.samples.length - 1];
    const span = first && last ? Math.max(1, Math.max(last.at, this.now() - 1000) - first.at) : 0;
    const rate = first && last && span > 0 ? ((last.bytes - first.bytes) * 1000) / span : 0;
    const left = Math.max(0, this.total - this.done);
    const etaSeconds = left === 0 ? 0 : rate > 0 ? Math.ceil(left / rate) : null;
    const percent = this.total === 0 ? 100 : Math.floor((this.done * 100) / this.total);
    const currentFiles = [...this.current].sort();
    const summary = !this.begun
      ? `Fetching: listing the files of ${this.repo}@${this.commit.slice(0, 12)}`
      : [
          `Fetching ${percent}%`,
          `${formatBytes(this.done)} of ${formatBytes(this.total)}`,
          ...(rate > 0 ? [`${formatBytes(rate)}/s`] : []),
          ...(etaSeconds !== null && left > 0 ? [`${formatDuration(etaSeconds)} left`] : []),
          ...(currentFiles.length ? [currentFiles.join(', ')] : []),
        ].join(' · ');
    return {
      repo: this.repo,
      commit: this.commit,
      bytesDone: this.done,
      bytesTotal: this.total,
      filesDone: this.filesDone,
      filesTotal: this.files,
      rate: Math.round(rate),
      etaSeconds,
      currentFiles,
      summary,
    };
  }
}

export function formatBytes(bytes: number): string {
  const units = ['B', 'KB', 'MB', 'GB', 'TB'];
  let value = bytes;
  let unit = 0;
  while (value >= 1000 && unit < units.length - 1) {
    value /= 1000;
    unit++;
  }
  return `${value >= 100 || unit === 0 ? Math.round(value) : value.toFixed(1)} ${units[unit]}`;
}

export function formatDuration(seconds: number): string {
  if (seconds < 60) return `${seconds}s`;
  if (seconds < 3600) return `${Math.round(seconds / 60)}m`;
  return `${Math.floor(seconds / 3600)}h${String(Math.round((seconds % 3600) / 60)).padStart(2, '0')}m`;
}
