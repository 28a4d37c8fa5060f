// Priorities and tenants of requests at the router: the names an operator writes in the keys file
// and a client in `x-llmgw-priority`, as numbers (higher goes first; below zero is sheddable, as
// in the Gateway API Inference Extension), and the class a request is held and counted under.
// Router side; pure.

/** The named priorities; any integer is allowed too. */
export const PRIORITIES = { critical: 1, standard: 0, sheddable: -1 } as const;
export type PriorityName = keyof typeof PRIORITIES;

export const DEFAULT_PRIORITY = PRIORITIES.standard;
/** Where a request without a key (no keys configured) is counted. */
export const ANONYMOUS_TENANT = '(none)';
export const PRIORITY_HEADER = 'x-llmgw-priority';

/** Bounds on a numeric priority: labels and refusals stay readable, and a line holds few levels. */
const MIN_PRIORITY = -100;
const MAX_PRIORITY = 100;

/** `critical`, `standard`, `sheddable` or an integer in [-100, 100]; an Error saying what is allowed otherwise. */
export function parsePriority(value: string | number): number | Error {
  if (typeof value === 'string') {
    const text = value.trim().toLowerCase();
    if (text in PRIORITIES) return PRIORITIES[text as PriorityName];
    if (!/^[+-]?\d+$/.test(text)) return new Error(allowed(value));
    value = Number(text);
  }
  if (!Number.isInteger(value) || value < MIN_PRIORITY || value > MAX_PRIORITY) return new Error(allowed(String(value)));
  return value;
}

function allowed(value: string): string {
  const shown = value.length > 24 ? `${value.slice(0, 24)}…` : value;
  return `priority \`${shown}\` is not one of critical, standard, sheddable or an integer from ${MIN_PRIORITY} to ${MAX_PRIORITY}`;
}

/** What metrics and /health call a priority: its name when it has one. */
export function priorityLabel(priority: number): string {
  for (const [name, value] of Object.entries(PRIORITIES)) if (value === priority) return name;
  return String(priority);
}

export function isSheddable(priority: number): boolean {
  return priority < 0;
}

/** Who a request is for, as flow control sees it: its tenant, the tenant's weight, and its priority. */
export interface FlowClass {
  readonly tenant: string;
  /** The tenant's weight: its share of a saturated deployment against other tenants at the same priority. */
  readonly weight: number;
  readonly priority: number;
}

export const ANONYMOUS_CLASS: FlowClass = { tenant: ANONYMOUS_TENANT, weight: 1, priority: DEFAULT_PRIORITY };

/**
 * The request's class: its key's, with the priority the request asked for when that is lower.
 * A request cannot raise itself above its key (without keys, above standard): a higher ask is
 * the key's priority, as if it had asked nothing.
 */
export function requestClass(key: FlowClass | undefined, header: string | string[] | undefined): FlowClass | Error {
  const base = key ?? ANONYMOUS_CLASS;
  if (header === undefined) return base;
  const text = (Array.isArray(header) ? (header[0] ?? '') : header).trim().toLowerCase();
  // Names only: a number would let any client make a new level (and new series) at will.
  if (!(text in PRIORITIES)) return new Error(`${PRIORITY_HEADER} must be critical, standard or sheddable`);
  const asked = PRIORITIES[text as PriorityName];
  return asked >= base.priority ? base : { ...base, priority: asked };
}
