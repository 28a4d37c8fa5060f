// CLI tables print colour only to a terminal and never with NO_COLOR: a table piped into a
// file or another program is plain text.
import { describe, expect, it } from 'vitest';
import { newTable, useColour } from '../../cli/commands/table.js';

function rendered(colour: boolean): string {
  const table = newTable({ head: ['node', 'state'] }, colour);
  table.push(['gpu-1', 'Ready']);
  return table.toString();
}

describe('CLI tables', () => {
  it('print no escape sequences off a terminal or with NO_COLOR, and colour on a terminal', () => {
    const tty = { isTTY: true } as NodeJS.WriteStream;
    const pipe = { isTTY: false } as NodeJS.WriteStream;
    expect(useColour(tty, {})).toBe(true);
    expect(useColour(pipe, {})).toBe(false);
    expect(useColour(tty, { NO_COLOR: '1' })).toBe(false);
    expect(rendered(false)).not.toContain('\u001b[');
    expect(rendered(false)).toContain('gpu-1');
    expect(rendered(true)).toContain('\u001b[');
  });
});
