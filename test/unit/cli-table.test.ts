// CLI tables print colour only to a terminal and never with NO_COLOR: a table piped into a
// file or another program is plain text.
import { describe, expect, it } from 'vitest';
import { newTable, useColour } from '../../cli/actions/table.js';

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
    // Whether escapes then appear is @colors/colors' call (it checks the terminal itself, and
    // CI has none), so the colour path is checked by the styles it keeps.
    const styled = newTable({ head: ['node'] }, true) as unknown as { options: { style: { head: string[] } } };
    const plain = newTable({ head: ['node'] }, false) as unknown as { options: { style: { head: string[] } } };
    expect(styled.options.style.head.length).toBeGreaterThan(0);
    expect(plain.options.style.head).toEqual([]);
  });
});
