// Reads a catalog file: YAML first, then the zod schema, with every error reported by its
// path and the YAML line it comes from, so that an operator can fix a file in one pass.
import { readFileSync } from 'node:fs';
import { isMap, isPair, isScalar, isSeq, LineCounter, parseDocument, type Document } from 'yaml';
import type { z } from 'zod';
import { Catalog, describeValue } from './schema.js';
import { modelsDir } from '../common/engine-cache.js';

export interface CatalogError {
  /** Where in the catalog, like `models[1].profiles[0].tensorParallel`; empty for the file as a whole. */
  path: string;
  message: string;
  /** 1-based line in the YAML file, when the error can be placed. */
  line?: number;
}

export type CatalogResult = { ok: true; catalog: Catalog } | { ok: false; errors: CatalogError[] };

type PathSegment = PropertyKey;

export function parseCatalog(text: string, fileName = 'catalog'): CatalogResult {
  const lineCounter = new LineCounter();
  const doc = parseDocument(text, { lineCounter, prettyErrors: true });
  if (doc.errors.length > 0) {
    return {
      ok: false,
      errors: doc.errors.map((error) => ({
        path: '',
        // yaml appends " at line L, column C:" and a source excerpt; the line is reported on its own.
        message: (error.message.split('\n')[0] ?? error.message).replace(/ at line \d+, column \d+:?$/, ''),
        ...(error.linePos ? { line: error.linePos[0].line } : {}),
      })),
    };
  }

  let data: unknown;
  try {
    data = doc.toJS();
  } catch (error) {
    // Unresolved aliases and alias bombs surface only when the document is built.
    return { ok: false, errors: [{ path: '', message: error instanceof Error ? error.message : String(error) }] };
  }
  if (data === null || data === undefined) {
    return { ok: false, errors: [{ path: '', message: `${fileName} is empty: expected a mapping with a "models" list` }] };
  }

  expandModelsDir(data);
  const parsed = Catalog.safeParse(data, { error: genericMessage });
  if (parsed.success) return { ok: true, catalog: parsed.data };
  return { ok: false, errors: parsed.error.issues.flatMap((issue) => toCatalogErrors(issue, doc, lineCounter)) };
}

/**
 * `${LLMGW_MODELS}` in a model's source is the machine's models folder (LLMGW_MODELS, else the
 * engine cache's, common/engine-cache.ts), where models that come in packages are assembled: so
 * the example catalog names the real demo model without naming a home folder. Read where the
 * catalog is read, so every revision carries (and signs) the path itself.
 */
function expandModelsDir(data: unknown): void {
  const models = (data as { models?: unknown }).models;
  if (!Array.isArray(models)) return;
  for (const model of models as Array<Record<string, unknown>>) {
    if (model && typeof model.source === 'string' && model.source.includes('${LLMGW_MODELS}'))
      model.source = model.source.replaceAll('${LLMGW_MODELS}', modelsDir());
  }
}

/** Reads and parses a catalog file; an unreadable file is an error naming the path, not an exception. */
export function loadCatalogFile(path: string): CatalogResult {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (error) {
    const code = typeof error === 'object' && error !== null && 'code' in error ? String(error.code) : undefined;
    const reason = code === 'ENOENT' ? 'no such file' : error instanceof Error ? error.message : String(error);
    return { ok: false, errors: [{ path: '', message: `cannot read catalog ${path}: ${reason}` }] };
  }
  return parseCatalog(text, path);
}

/** One line per error, `FILE:LINE: PATH: MESSAGE`, joined with newlines. */
export function formatCatalogErrors(errors: readonly CatalogError[], fileName: string): string {
  return errors
    .map((error) => {
      const where = error.line === undefined ? fileName : `${fileName}:${error.line}`;
      return error.path === '' ? `${where}: ${error.message}` : `${where}: ${error.path}: ${error.message}`;
    })
    .join('\n');
}

/** Renders a zod path the way a reader of the YAML thinks of it: `models[1].profiles[0].env.FOO`. */
export function formatPath(path: readonly PathSegment[]): string {
  let out = '';
  for (const segment of path) {
    if (typeof segment === 'number') out += `[${segment}]`;
    else if (typeof segment === 'string' && /^[A-Za-z_][A-Za-z0-9_]*$/.test(segment)) out += out === '' ? segment : `.${segment}`;
    else out += `[${JSON.stringify(String(segment))}]`;
  }
  return out;
}

// Wording for the issues the schema does not phrase itself.
function genericMessage(issue: z.core.$ZodRawIssue): string | undefined {
  switch (issue.code) {
    case 'invalid_type': {
      if (issue.input === undefined) return 'is required';
      const expected = issue.expected === 'int' ? 'a whole number' : issue.expected === 'array' ? 'a list' : `a ${issue.expected}`;
      return `expected ${expected}, got ${describeValue(issue.input)}`;
    }
    case 'too_small':
      return issue.origin === 'array' ? `needs at least ${String(issue.minimum)} item(s)` : `must be at least ${String(issue.minimum)}`;
    case 'too_big':
      return `must be at most ${String(issue.maximum)}`;
    default:
      return undefined;
  }
}

function toCatalogErrors(issue: z.core.$ZodIssue, doc: Document, lineCounter: LineCounter): CatalogError[] {
  // An unknown key is reported at the key itself, one error per key, so that each line
  // points at a typo; the message names all of them.
  const paths: PathSegment[][] =
    issue.code === 'unrecognized_keys' && issue.keys.length > 0 ? issue.keys.map((key) => [...issue.path, key]) : [[...issue.path]];
  return paths.map((path) => {
    const offset = offsetOf(doc, path);
    return {
      path: formatPath(path),
      message: issue.message,
      ...(offset === undefined ? {} : { line: lineCounter.linePos(offset).line }),
    };
  });
}

/**
 * The source offset of the node at `path`, or of its deepest ancestor present in the YAML
 * (a missing key is placed at the mapping that lacks it). For a mapping entry the key's
 * position is used: it is the line a reader looks for.
 */
function offsetOf(doc: Document, path: readonly PathSegment[]): number | undefined {
  let node: unknown = doc.contents;
  let offset = rangeStart(node);
  for (const segment of path) {
    if (isMap(node)) {
      const pair = node.items.find((item) => isPair(item) && isScalar(item.key) && String(item.key.value) === String(segment));
      if (!pair) break;
      offset = rangeStart(pair.key) ?? rangeStart(pair.value) ?? offset;
      node = pair.value;
    } else if (isSeq(node) && typeof segment === 'number') {
      const item: unknown = node.items[segment];
      if (item === undefined) break;
      offset = rangeStart(item) ?? offset;
      node = item;
    } else {
      break;
    }
  }
  return offset;
}

function rangeStart(node: unknown): number | undefined {
  if (typeof node !== 'object' || node === null || !('range' in node)) return undefined;
  const range = node.range;
  return Array.isArray(range) && typeof range[0] === 'number' ? range[0] : undefined;
}
