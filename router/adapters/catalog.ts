// What the catalog says may be served as adapters, indexed for the router: adapter name → its
// spec and base, and each base's list (for a 404's hint and /v1/models). Rebuilt when the
// catalog object or the route table changes. Router side.

export interface AdapterSpec {
  name: string;
  /** The path the engine loads it from. */
  source: string;
}

/** What may be served: base (catalog model name or served name) → its adapters. Called often; return the same object while unchanged. */
export type AdapterCatalog = () => ReadonlyMap<string, readonly AdapterSpec[]>;

/** A base model's pool as the index reads it (engines/model-pool.ts): its served name and its replicas. */
export interface BasePool {
  readonly servedName: string;
  readonly endpoints: readonly unknown[];
}

export class AdapterIndex {
  private byName = new Map<string, { spec: AdapterSpec; base: string }>();
  private byBase = new Map<string, AdapterSpec[]>();
  private indexedFrom: ReadonlyMap<string, readonly AdapterSpec[]> | undefined;

  constructor(
    private readonly catalog: AdapterCatalog,
    /** Base pools by served name, and each base's catalog model names (from the deployments). */
    private readonly bases: () => Iterable<{ pool: BasePool; models: readonly string[] }>,
  ) {}

  /** The adapter by name, with the served name of its base. */
  lookup(name: string): { spec: AdapterSpec; base: string } | undefined {
    this.refresh();
    return this.byName.get(name);
  }

  /** A base's adapters (by served name); undefined when it has none. */
  adaptersOf(servedName: string): readonly AdapterSpec[] | undefined {
    return this.byBase.get(servedName);
  }

  /** For a 404: every adapter the catalog lists, by base. */
  known(): string {
    this.refresh();
    const parts = [...this.byBase].map(([base, list]) => `${base}: ${list.map((a) => a.name).join(', ')}`);
    return parts.length === 0 ? '' : ` Known adapters by base model: ${parts.join('; ')}.`;
  }

  /** /v1/models entries of every adapter whose base has a replica, with `parent` as vLLM writes it. */
  modelCards(created: number): object[] {
    this.refresh();
    const cards: object[] = [];
    for (const { pool } of this.bases()) {
      if (pool.endpoints.length === 0) continue;
      for (const a of this.byBase.get(pool.servedName) ?? [])
        cards.push({ id: a.name, object: 'model', created, owned_by: 'llmgw', root: a.source, parent: pool.servedName });
    }
    return cards;
  }

  /** Reads the catalog and the bases again (the route table changed, or a poll). */
  rebuild(): void {
    this.indexedFrom = this.catalog();
    const byName = new Map<string, { spec: AdapterSpec; base: string }>();
    const byBase = new Map<string, AdapterSpec[]>();
    for (const { pool, models } of this.bases()) {
      const specs = [pool.servedName, ...models].map((m) => this.indexedFrom?.get(m)).find((s) => s !== undefined) ?? [];
      if (specs.length === 0) continue;
      byBase.set(pool.servedName, [...specs]);
      for (const spec of specs) byName.set(spec.name, { spec, base: pool.servedName });
    }
    this.byName = byName;
    this.byBase = byBase;
  }

  /** Rebuilds only when the catalog handed back another object. */
  private refresh(): void {
    if (this.catalog() !== this.indexedFrom) this.rebuild();
  }
}
