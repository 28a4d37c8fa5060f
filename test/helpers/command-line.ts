// Command lines written the way a person types them, split into the argv a process is given: a
// test reads `words('--host 10.0.0.5 --port 18000')` as one line instead of one line a word.

/** Each part split on single spaces, in order; a part is one group of flags that belong together. */
export function words(...parts: string[]): string[] {
  return parts.flatMap((part) => part.split(' '));
}
