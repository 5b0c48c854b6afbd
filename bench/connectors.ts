/**
 * How the benches run a connector process: as in production by default, i.e. the compiled code
 * (`npm run build`: dist/, with its prebuilt workflow bundle) under PRODUCTION_NODE_FLAGS, so
 * that memory and CPU figures are those of `npm run serve` and the Docker image. The build is
 * brought up to date first (a bench of stale code measures nothing). `--tsx` runs the TypeScript
 * sources instead (no build; tsx adds ≈ 45 MB and the worker bundles its workflows at start
 * unless it is handed a bundle).
 */
import fs from 'node:fs';
import path from 'node:path';
import { spawnSync } from 'node:child_process';
import { PROJECT_ROOT, PRODUCTION_ENV, PRODUCTION_NODE_FLAGS } from '../config.js';

export type ConnectorMode = 'dist' | 'tsx';

const SOURCE_ROOTS = [
  'api',
  'activities',
  'auth',
  'cli',
  'db',
  'dev',
  'domain',
  'gateway',
  'workflows',
  'config.ts',
  'main.ts',
  'bench/connector-process.ts',
  'package.json',
  'tsconfig.json',
  'tsconfig.build.json',
];
/** Written last by `npm run build`: its time is the time of the build. */
const BUILD_STAMP = path.join(PROJECT_ROOT, 'dist', 'workflow-bundle.js');
const COMPILED_ENTRY = path.join(PROJECT_ROOT, 'dist', 'bench', 'connector-process.js');
const SOURCE_ENTRY = path.join(PROJECT_ROOT, 'bench', 'connector-process.ts');

export function connectorMode(args: string[]): ConnectorMode {
  return args.includes('--tsx') ? 'tsx' : 'dist';
}

function newestSourceMs(entry: string): number {
  const stat = fs.statSync(entry, { throwIfNoEntry: false });
  if (!stat) return 0;
  if (!stat.isDirectory()) return /\.(ts|json)$/.test(entry) ? stat.mtimeMs : 0;
  let newest = 0;
  for (const name of fs.readdirSync(entry)) newest = Math.max(newest, newestSourceMs(path.join(entry, name)));
  return newest;
}

/** Runs `npm run build` when dist/ is missing or older than any source file; throws if it fails. */
export function ensureBuilt(say: (line: string) => void): void {
  const built = fs.statSync(BUILD_STAMP, { throwIfNoEntry: false })?.mtimeMs ?? 0;
  const sources = Math.max(...SOURCE_ROOTS.map((s) => newestSourceMs(path.join(PROJECT_ROOT, s))));
  if (built >= sources && fs.existsSync(COMPILED_ENTRY)) return;
  say(built ? 'dist/ is older than the sources: npm run build…' : 'no build yet: npm run build…');
  const result = spawnSync('npm', ['run', 'build'], {
    cwd: PROJECT_ROOT,
    stdio: ['ignore', 'inherit', 'inherit'],
  });
  if (result.status !== 0) throw new Error(`npm run build failed (exit ${result.status ?? result.signal})`);
}

/** Environment to add for a connector process in `mode` (production's, for the compiled one). */
export function connectorEnv(mode: ConnectorMode): Record<string, string> {
  return mode === 'dist' ? { ...PRODUCTION_ENV } : {};
}

/** Node arguments that start one connector process (bench/connector-process.ts) in `mode`. */
export function connectorArgs(mode: ConnectorMode): string[] {
  return mode === 'dist' ? [...PRODUCTION_NODE_FLAGS, COMPILED_ENTRY] : ['--import', 'tsx', SOURCE_ENTRY];
}

export function describeConnectors(mode: ConnectorMode): string {
  return mode === 'dist'
    ? `connectors run compiled (dist/, prebuilt workflow bundle) with ${PRODUCTION_NODE_FLAGS.join(' ')} and ${Object.entries(
        PRODUCTION_ENV,
      )
        .map(([k, v]) => `${k}=${v}`)
        .join(' ')}, as npm run serve does`
    : 'connectors run the TypeScript sources through tsx (adds ≈ 45 MB to their RSS)';
}
