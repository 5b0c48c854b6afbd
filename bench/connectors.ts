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
import readline from 'node:readline';
import { spawnSync, type ChildProcess } from 'node:child_process';
import { PROJECT_ROOT, PRODUCTION_ENV, PRODUCTION_NODE_FLAGS } from '../config.js';
import { spawnBound } from '../dev/processes.js';
import { api, type Api } from '../dev/management-api.js';

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

export interface ConnectorProcess {
  name: string;
  child: ChildProcess;
  pid: number;
  url: string;
  did: string;
  adminKey: string;
  api: Api;
  /**
   * Asks the process for its process.memoryUsage() and its heap after a full collection
   * (`liveHeap`; SIGUSR2, which runs that collection); null when it does not answer.
   */
  memoryUsage(): Promise<(NodeJS.MemoryUsage & { liveHeap: number }) | null>;
}

/**
 * Starts bench/connector-process.ts in `mode` on a fresh database (configuration in `env`, as in
 * production) and waits for its ready line. Its log goes to our stderr prefixed with `name`
 * (the first 30 lines; the last 20 are shown if it exits before it is ready).
 */
export async function startConnectorProcess(
  name: string,
  env: Record<string, string>,
  mode: ConnectorMode,
  nodeArgs: string[] = [],
): Promise<ConnectorProcess> {
  const child = spawnBound(process.execPath, [...nodeArgs, ...connectorArgs(mode)], {
    deathSignal: 'TERM',
    cwd: PROJECT_ROOT,
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { ...process.env, ...connectorEnv(mode), ...env },
  });
  const tail: string[] = [];
  let shown = 0;
  readline.createInterface({ input: child.stderr! }).on('line', (line) => {
    tail.push(line);
    if (tail.length > 20) tail.shift();
    if (++shown <= 30)
      process.stderr.write(`[${name}] ${line.length > 400 ? `${line.slice(0, 400)}…` : line}\n`);
    else if (shown === 31) process.stderr.write(`[${name}] (more log lines are not shown)\n`);
  });
  let onMemory: ((m: NodeJS.MemoryUsage & { liveHeap: number }) => void) | null = null;
  const ready = await new Promise<{ url: string; did: string; adminKey: string | null }>(
    (resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`${name} was not ready after 120 s`)), 120_000);
      readline.createInterface({ input: child.stdout! }).on('line', (line) => {
        try {
          const parsed = JSON.parse(line) as {
            ready?: boolean;
            memory?: NodeJS.MemoryUsage & { liveHeap: number };
          };
          if (parsed.memory) onMemory?.(parsed.memory);
          else if (parsed.ready) {
            clearTimeout(timer);
            resolve(parsed as { url: string; did: string; adminKey: string | null });
          }
        } catch {
          // not one of our lines
        }
      });
      child.once('exit', (code) => {
        clearTimeout(timer);
        reject(new Error(`${name} exited (${code}) before it was ready:\n${tail.join('\n')}`));
      });
    },
  );
  if (!ready.adminKey) throw new Error(`${name}: a fresh database must yield an initial admin key`);
  return {
    name,
    child,
    pid: child.pid!,
    url: ready.url,
    did: ready.did,
    adminKey: ready.adminKey,
    api: api(ready.url, ready.adminKey),
    memoryUsage: () =>
      new Promise((resolve) => {
        const timer = setTimeout(() => resolve(null), 3000);
        onMemory = (m) => {
          clearTimeout(timer);
          onMemory = null;
          resolve(m);
        };
        child.kill('SIGUSR2');
      }),
  };
}
