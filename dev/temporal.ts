/**
 * The Temporal dev server (`temporal server start-dev`). The CLI binary is found in this order:
 * TEMPORAL_CLI, `temporal` on PATH, the project's cache directory; else it is built once with
 * `go install …@v1.5.1` (newer tags carry a replace directive that `go install` refuses).
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { spawnSync, type ChildProcess } from 'node:child_process';
import { createHash, randomUUID } from 'node:crypto';
import { Connection } from '@temporalio/client';
import { freePort, portIsFree, spawnBound, stopChild, waitUntil } from './processes.js';
import { SEARCH_ATTRIBUTES } from '../domain/search-attributes.js';

export const TEMPORAL_CLI_VERSION = 'v1.5.1';
const MODULE = `github.com/temporalio/cli/cmd/temporal@${TEMPORAL_CLI_VERSION}`;

export function temporalCacheDir(): string {
  const base = process.env.XDG_CACHE_HOME || path.join(os.homedir(), '.cache');
  return path.join(base, 'building-connector', `temporal-cli-${TEMPORAL_CLI_VERSION}`);
}

function onPath(name: string): string | undefined {
  for (const dir of (process.env.PATH ?? '').split(path.delimiter)) {
    const candidate = path.join(dir, name);
    try {
      fs.accessSync(candidate, fs.constants.X_OK);
      return candidate;
    } catch {
      // not here
    }
  }
  return undefined;
}

const works = (binary: string) =>
  spawnSync(binary, ['--version'], { encoding: 'utf8', timeout: 20_000 }).status === 0;

/** Resolves the CLI, building it when needed. `say` shows progress to the person waiting. */
export async function resolveTemporalCli(options: {
  explicit?: string | null;
  say: (line: string) => void;
}): Promise<string> {
  if (options.explicit) {
    if (!works(options.explicit))
      throw new Error(`TEMPORAL_CLI=${options.explicit} is not a working temporal binary`);
    return options.explicit;
  }
  const fromPath = onPath('temporal');
  if (fromPath && works(fromPath)) return fromPath;
  const cached = path.join(temporalCacheDir(), 'temporal');
  if (fs.existsSync(cached) && works(cached)) return cached;
  return buildTemporalCli(cached, options.say);
}

/**
 * Builds the CLI into the cache. A lock directory keeps two processes from building at once:
 * the second waits for the first and then uses its binary.
 */
async function buildTemporalCli(target: string, say: (line: string) => void): Promise<string> {
  const go = onPath('go');
  if (!go) {
    throw new Error(
      'The Temporal CLI was not found and Go is not installed to build it. Provide it in one of these ways:\n' +
        '  - set TEMPORAL_CLI to the path of a temporal binary (v1.4 or newer), or\n' +
        "  - put 'temporal' on PATH, or\n" +
        `  - install Go 1.25+ and run npm start again (it builds ${MODULE} once, about 4 minutes), or\n` +
        '  - set TEMPORAL_ADDRESS to use a Temporal server you already run.',
    );
  }
  const dir = path.dirname(target);
  fs.mkdirSync(dir, { recursive: true });
  const lock = path.join(dir, '.build-lock');
  for (;;) {
    try {
      fs.mkdirSync(lock);
      fs.writeFileSync(path.join(lock, 'pid'), String(process.pid));
      break;
    } catch {
      const holder = Number(fs.readFileSync(path.join(lock, 'pid'), { encoding: 'utf8', flag: 'a+' }) || 0);
      if (holder && !alive(holder)) {
        fs.rmSync(lock, { recursive: true, force: true });
        continue;
      }
      say(`waiting for another process (pid ${holder || '?'}) that is building the Temporal CLI…`);
      await waitUntil(
        'the Temporal CLI build of another process',
        () => Promise.resolve(!fs.existsSync(lock)),
        {
          timeoutMs: 30 * 60_000,
          intervalMs: 1000,
        },
      );
      if (fs.existsSync(target) && works(target)) return target;
    }
  }
  try {
    say(`Building the Temporal CLI (${MODULE}) with ${go}; this happens once and takes about 4 minutes…`);
    const started = Date.now();
    const staging = fs.mkdtempSync(path.join(dir, '.build-'));
    await new Promise<void>((resolve, reject) => {
      const child: ChildProcess = spawnBound(go, ['install', '-v', MODULE], {
        env: { ...process.env, GOBIN: staging, CGO_ENABLED: '0', GOFLAGS: '-mod=mod' },
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      let packages = 0;
      let lastSaid = Date.now();
      const tail: string[] = [];
      const onLine = (chunk: Buffer) => {
        for (const line of chunk.toString('utf8').split('\n').filter(Boolean)) {
          tail.push(line);
          if (tail.length > 20) tail.shift();
          if (!line.startsWith('go: downloading')) packages++;
          if (Date.now() - lastSaid > 15_000) {
            lastSaid = Date.now();
            say(
              `  …still building: ${packages} packages compiled, ${Math.round((Date.now() - started) / 1000)} s`,
            );
          }
        }
      };
      child.stdout!.on('data', onLine);
      child.stderr!.on('data', onLine);
      child.on('error', reject);
      child.on('exit', (code) =>
        code === 0 ? resolve() : reject(new Error(`go install failed (exit ${code}):\n${tail.join('\n')}`)),
      );
    });
    fs.renameSync(path.join(staging, 'temporal'), target);
    fs.rmSync(staging, { recursive: true, force: true });
    say(`Temporal CLI built in ${Math.round((Date.now() - started) / 1000)} s: ${target}`);
    return target;
  } finally {
    fs.rmSync(lock, { recursive: true, force: true });
  }
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

export interface TemporalDevServer {
  address: string;
  uiUrl: string | null;
  stop(): Promise<void>;
}

export async function startTemporalDevServer(options: {
  cli: string;
  /** SQLite file for a persistent server; in memory when left out. */
  dbFile?: string;
  headless?: boolean;
  port?: number | null;
  uiPort?: number | null;
  namespace?: string;
  logFile?: string;
}): Promise<TemporalDevServer> {
  const port = options.port ?? ((await portIsFree(7233)) && !options.headless ? 7233 : await freePort());
  const uiPort = options.headless
    ? null
    : (options.uiPort ?? ((await portIsFree(port + 1000)) ? port + 1000 : await freePort()));
  // Two stacks started at the same moment can both find a port free; the second server then
  // fails to bind while the first one answers on that port. So our server also gets a namespace
  // of its own, and it is ready when *that* namespace answers: never another stack's server.
  const marker = `stack-${createHash('sha256')
    .update(options.dbFile ? path.resolve(options.dbFile) : randomUUID())
    .digest('hex')
    .slice(0, 12)}`;
  const args = [
    'server',
    'start-dev',
    '--namespace',
    marker,
    '--ip',
    '127.0.0.1',
    '--port',
    String(port),
    '--log-level',
    'warn',
    '--namespace',
    options.namespace ?? 'default',
    ...SEARCH_ATTRIBUTES.flatMap((a) => ['--search-attribute', `${a.name}=${a.type}`]),
    // Activities scheduled by a workflow task go straight back to the worker that completed it,
    // skipping a task-queue round trip (about 35 ms each on this server, bench/negotiation).
    '--dynamic-config-value',
    'system.enableActivityEagerExecution=true',
  ];
  if (options.dbFile) {
    fs.mkdirSync(path.dirname(options.dbFile), { recursive: true });
    args.push('--db-filename', options.dbFile, '--sqlite-pragma', 'journal_mode=wal');
  }
  if (uiPort === null) args.push('--headless');
  else args.push('--ui-port', String(uiPort), '--ui-ip', '127.0.0.1');

  const out = options.logFile ? fs.openSync(options.logFile, 'a') : 'ignore';
  const child = spawnBound(options.cli, args, { deathSignal: 'TERM', stdio: ['ignore', out, out] });
  if (typeof out === 'number') fs.closeSync(out);
  const address = `127.0.0.1:${port}`;
  await waitUntil(
    `the Temporal dev server${options.logFile ? ` (log: ${options.logFile})` : ''}`,
    async () => {
      const connection = await Connection.connect({ address, connectTimeout: 1000 });
      try {
        await connection.workflowService.describeNamespace({ namespace: marker });
        await connection.workflowService.describeNamespace({ namespace: options.namespace ?? 'default' });
        return true;
      } finally {
        await connection.close();
      }
    },
    { timeoutMs: 60_000, child },
  );
  return {
    address,
    uiUrl: uiPort === null ? null : `http://127.0.0.1:${uiPort}`,
    stop: () => stopChild(child, 'SIGTERM'),
  };
}
