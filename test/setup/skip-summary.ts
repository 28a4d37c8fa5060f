// A vitest reporter that closes the run with every skipped test and why (the note a test gave
// ctx.skip, or the reason its file recorded with test/helpers/skips.ts). Under CI=true a skip
// fails the run: CI installs everything, so a skipped test there is a test that did not run.
import { existsSync, readFileSync } from 'node:fs';
import type { Reporter, TestModule } from 'vitest/node' with { 'resolution-mode': 'import' };

export default class SkipSummary implements Reporter {
  onTestRunEnd(testModules: ReadonlyArray<TestModule>): void {
    const fileReasons = new Map<string, string>();
    const log = process.env.LLMGW_TEST_SKIPS_FILE;
    if (log && existsSync(log)) {
      for (const line of readFileSync(log, 'utf8').split('\n').filter(Boolean)) {
        const { file, reason } = JSON.parse(line) as { file: string; reason: string };
        fileReasons.set(file, reason);
      }
    }
    const lines: string[] = [];
    for (const module of testModules) {
      for (const test of module.children.allTests()) {
        const result = test.result();
        if (result.state !== 'skipped') continue;
        const why = result.note ?? fileReasons.get(module.moduleId) ?? 'no reason recorded';
        lines.push(`  ${module.relativeModuleId} > ${test.fullName}\n      ${why}`);
      }
    }
    if (lines.length === 0) {
      console.log('\nskipped: none');
      return;
    }
    console.log(`\nskipped: ${lines.length} test(s), and why:\n${lines.join('\n')}`);
    if (process.env.CI === 'true') {
      console.log('CI=true: CI installs everything the tests need, so every skip above fails the run.');
      process.exitCode = 1;
    }
  }
}
