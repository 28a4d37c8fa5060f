// Lint rules: typescript-eslint with type information, so that a forgotten await
// (a floating promise) is an error, and Node built-ins are forbidden in workflows/,
// where Temporal's sandbox would reject them at bundle time anyway.
import js from '@eslint/js';
import tseslint from 'typescript-eslint';
import { builtinModules } from 'node:module';

const nodeBuiltins = [...builtinModules, ...builtinModules.map((m) => `node:${m}`)];

export default tseslint.config(
  { ignores: ['dist/**', 'node_modules/**', '.llmgw/**', 'proto/gen/**', 'bin/**', 'eslint.config.mjs', 'scripts/**'] },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  {
    languageOptions: {
      parserOptions: { projectService: true, tsconfigRootDir: import.meta.dirname },
    },
    rules: {
      '@typescript-eslint/no-floating-promises': 'error',
      '@typescript-eslint/no-explicit-any': 'error',
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_' }],
    },
  },
  {
    files: ['workflows/**/*.ts'],
    rules: {
      'no-restricted-imports': [
        'error',
        {
          paths: nodeBuiltins.map((name) => ({
            name,
            message: 'Workflows run in a deterministic sandbox: no Node built-ins. Do this in an activity.',
          })),
        },
      ],
    },
  },
);
