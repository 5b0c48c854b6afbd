/**
 * `npm run tck [-- GROUP…] [--self-check]`: the Eclipse DSP TCK (1.0.0-RC6, DSP 2025-1) against
 * this connector (docs/tck.md).
 *
 * 1. The TCK's jars come from Maven Central (tck/pom.xml) into the cache directory, once.
 * 2. An embedded stack (PostgreSQL, Temporal dev server, sample backend) and one connector with
 *    the TCK profile (tck/profile) start, as `npm start` would, on free loopback ports.
 * 3. The JUnit Platform console launcher runs the TCK's test classes (all six groups, or the
 *    ones named) against it; the TCK is configured with JVM system properties.
 * 4. Its XML report gives one line per test and per group; the run fails on any failing test
 *    or when nothing ran.
 *
 * `--self-check` runs the TCK against its own built-in connector instead (no stack): it passes
 * 65 when the harness works.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { createHash, randomBytes } from 'node:crypto';
import { spawn, spawnSync } from 'node:child_process';
import readline from 'node:readline';
import { pino } from 'pino';
import { PROJECT_ROOT, loadConfig } from '../config.js';
import { startConnector, type RunningConnector } from '../main.js';
import { ensureDatabase } from '../db/knex.js';
import { defaultTestDataDir, startEmbeddedPostgres } from '../dev/postgres.js';
import { resolveTemporalCli, startTemporalDevServer } from '../dev/temporal.js';
import { startBuildingBackend } from '../dev/building-backend/index.js';
import { freePort } from '../dev/processes.js';
import { buildingDataContextUrl } from '../domain/dsp.js';
import { createTckProfile, type TckProfile } from './profile/index.js';
import { NEGOTIATION_WEBHOOK, TRANSFER_WEBHOOK } from './profile/webhooks.js';
import { GROUPS, formatReport, parseJunitXml, type Group, type TckResult } from './report.js';
import { tckTestIds } from './test-ids.js';

export const TCK_VERSION = '1.0.0-RC6';
const POM = path.join(PROJECT_ROOT, 'tck', 'pom.xml');
const WORK = path.join(PROJECT_ROOT, '.tck');
const VERIFICATION = 'org.eclipse.dataspacetck.dsp.verification';
const BUILDING_DATA_CONTEXT_FILE = path.join(
  PROJECT_ROOT,
  'api',
  'protocol',
  'contexts',
  'building-data-v1.json',
);

/** The TCK's test classes per group. */
const CLASSES: Record<Group, string[]> = {
  MET: ['metadata.Metadata01Test'],
  CAT: ['catalog.Catalog01Test'],
  CN: ['01', '02', '03'].map((n) => `cn.ContractNegotiationProvider${n}Test`),
  CN_C: ['01', '02', '03'].map((n) => `cn.ContractNegotiationConsumer${n}Test`),
  TP: ['01', '02', '03'].map((n) => `tp.TransferProcessProvider${n}Test`),
  TP_C: ['01', '02', '03'].map((n) => `tp.TransferProcessConsumer${n}Test`),
};

const say = (line: string) => process.stderr.write(`[tck] ${line}\n`);

function cacheDir(): string {
  const base = process.env.XDG_CACHE_HOME || path.join(os.homedir(), '.cache');
  return path.join(base, 'building-connector', 'tck');
}

function requireTool(command: string, args: string[], hint: string) {
  const r = spawnSync(command, args, { encoding: 'utf8' });
  if (r.error || r.status !== 0) throw new Error(`${command} is needed for the TCK (${hint})`);
}

/** The TCK's jars, fetched with Maven once per pom.xml content; the directory appears complete or not at all. */
function ensureJars(): string {
  const pomHash = createHash('sha256').update(fs.readFileSync(POM)).digest('hex').slice(0, 12);
  const lib = path.join(cacheDir(), `lib-${TCK_VERSION}-${pomHash}`);
  if (fs.existsSync(lib)) return lib;
  requireTool('java', ['-version'], 'Java 17 or newer');
  requireTool('mvn', ['-v'], 'Apache Maven');
  say(`fetching the TCK ${TCK_VERSION} with Maven into ${lib} (once)…`);
  const staging = `${lib}.partial-${process.pid}`;
  fs.rmSync(staging, { recursive: true, force: true });
  const r = spawnSync(
    'mvn',
    [
      '-B',
      '-q',
      '-f',
      POM,
      `-Dmaven.repo.local=${path.join(cacheDir(), 'repository')}`,
      'dependency:copy-dependencies',
      `-DoutputDirectory=${staging}`,
    ],
    { stdio: ['ignore', 'inherit', 'inherit'] },
  );
  if (r.status !== 0) throw new Error(`Maven could not fetch the TCK (exit ${r.status})`);
  try {
    fs.renameSync(staging, lib);
  } catch (err) {
    // Another run got there first.
    if (!fs.existsSync(lib)) throw err;
    fs.rmSync(staging, { recursive: true, force: true });
  }
  return lib;
}

interface Options {
  groups: Group[];
  /** Single tests (`CN:01-04`): their methods (`cn_01_04`), to narrow the groups' classes. */
  methods: string[];
  /** Groups named as a whole (with single tests elsewhere, their classes are kept whole). */
  whole: Group[];
  selfCheck: boolean;
}

function parseArgs(argv: string[]): Options {
  const groups = new Set<Group>();
  const whole = new Set<Group>();
  const methods: string[] = [];
  let selfCheck = false;
  for (const arg of argv) {
    const test = /^([A-Z_]+):(\d{2})-(\d{2})$/i.exec(arg);
    const group = (test ? test[1]! : arg).toUpperCase();
    if (arg === '--self-check') selfCheck = true;
    else if ((GROUPS as readonly string[]).includes(group)) {
      groups.add(group as Group);
      if (!test) whole.add(group as Group);
      if (test) methods.push(`${group === 'MET' ? 'cat' : group.toLowerCase()}_${test[2]}_${test[3]}`);
    } else
      throw new Error(
        `unknown argument ${arg} (groups: ${GROUPS.join(' ')}; a test id like CN:01-04; --self-check)`,
      );
  }
  return { groups: groups.size ? [...groups] : [...GROUPS], methods, whole: [...whole], selfCheck };
}

/** The connector under test: embedded stack, sample backend, the TCK profile. */
async function startConnectorUnderTest(authorization: string, tckAddress: string) {
  const stops: Array<() => Promise<unknown>> = [];
  const stop = async () => {
    for (const s of stops.reverse()) await s().catch((err: unknown) => say(`while stopping: ${String(err)}`));
  };
  try {
    const dataDir = defaultTestDataDir();
    stops.push(() => Promise.resolve(fs.rmSync(dataDir, { recursive: true, force: true })));
    const cli = await resolveTemporalCli({ explicit: process.env.TEMPORAL_CLI ?? null, say });
    const [postgres, temporal] = await Promise.all([
      startEmbeddedPostgres({ dataDir, ephemeral: true }),
      startTemporalDevServer({ cli, headless: true }),
    ]);
    stops.push(
      () => postgres.stop(),
      () => temporal.stop(),
    );
    const backendKey = randomBytes(12).toString('hex');
    const backend = await startBuildingBackend({ keys: { [backendKey]: '*' } });
    stops.push(() => backend.close());
    await ensureDatabase(postgres.adminUrl, 'tck');

    const logger = pino(
      { level: 'info' },
      pino.destination({ dest: path.join(WORK, 'connector.log'), sync: false }),
    );
    const profile: TckProfile = createTckProfile({ authorization, tckAddress, logger });
    const port = await freePort();
    const config = loadConfig({
      PORT: String(port),
      HOST: '127.0.0.1',
      PUBLIC_URL: `http://127.0.0.1:${port}`,
      DATA_DIR: dataDir,
      DEMO_BACKEND: '0',
      KEY_ENCRYPTION_KEY: randomBytes(32).toString('base64'),
      TEMPORAL_TASK_QUEUE: 'tck',
      LOG_LEVEL: 'info',
      // The TCK and we are on loopback: its DID and callback address are loopback ones.
      DID_WEB_ALLOW_HTTP: 'true',
    });
    const connector: RunningConnector = await startConnector(config, {
      databaseUrl: postgres.urlFor('tck'),
      temporalAddress: temporal.address,
      logger,
      profile: profile.surface,
    });
    stops.push(
      () => connector.stop(),
      () => profile.stop(),
    );
    if (!connector.initialAdminKey) throw new Error('a fresh database must yield an admin key');
    await profile.attach({
      url: connector.url,
      adminKey: connector.initialAdminKey,
      db: connector.db,
      did: connector.identity.did,
      backend: { url: backend.url, key: backendKey },
    });
    return { connector, profile, stop };
  } catch (err) {
    await stop();
    throw err;
  }
}

function systemProperties(
  target: { selfCheck: true } | { selfCheck: false; url: string; did: string; authorization: string },
  tckPort: number,
): string[] {
  const props: Record<string, string> = {
    'dataspacetck.launcher': 'org.eclipse.dataspacetck.dsp.system.DspSystemLauncher',
    'dataspacetck.host': '127.0.0.1',
    'dataspacetck.port': String(tckPort),
    'dataspacetck.callback.address': `http://127.0.0.1:${tckPort}`,
    'dataspacetck.dsp.default.wait': '15',
    'dataspacetck.ansi': 'false',
    'dataspacetck.dsp.local.connector': String(target.selfCheck),
  };
  if (!target.selfCheck) {
    // The built-in connector makes up its own ids; ours name the profile's seed data.
    Object.assign(props, tckTestIds(), {
      'dataspacetck.dsp.connector.agent.id': target.did,
      'dataspacetck.dsp.connector.http.url': `${target.url}/dsp`,
      'dataspacetck.dsp.connector.http.base.url': target.url,
      'dataspacetck.dsp.connector.http.headers.authorization': target.authorization,
      'dataspacetck.dsp.connector.negotiation.initiate.url': `${target.url}${NEGOTIATION_WEBHOOK}`,
      'dataspacetck.dsp.connector.transfer.initiate.url': `${target.url}${TRANSFER_WEBHOOK}`,
      // Our own JSON-LD context, from the repository: the TCK expands with local documents only.
      'dataspacetck.dsp.jsonld.context.buildingdata.uri': buildingDataContextUrl(target.url),
      'dataspacetck.dsp.jsonld.context.buildingdata.path': BUILDING_DATA_CONTEXT_FILE,
    });
  }
  return Object.entries(props).map(([k, v]) => `-D${k}=${v}`);
}

/** Runs the console launcher; echoes one line per finished test; resolves with its exit code. */
function runLauncher(
  lib: string,
  props: string[],
  options: Pick<Options, 'groups' | 'methods' | 'whole'>,
  reports: string,
): Promise<number> {
  const args = [
    ...props,
    '-cp',
    `${lib}${path.sep}*`,
    'org.junit.platform.console.ConsoleLauncher',
    'execute',
    '--disable-banner',
    '--disable-ansi-colors',
    '--details=testfeed',
    `--reports-dir=${reports}`,
    ...options.groups.flatMap((g) => CLASSES[g].map((c) => `--select-class=${VERIFICATION}.${c}`)),
    // Method filters are or-ed: single tests, plus every method of the groups named whole.
    ...(options.methods.length
      ? [
          ...options.methods.map((m) => `--include-methodname=.*[.#]${m}`),
          ...options.whole.flatMap((g) =>
            CLASSES[g].map((c) => `--include-methodname=.*\\.${c.split('.')[1]}[.#].*`),
          ),
        ]
      : []),
  ];
  const log = fs.createWriteStream(path.join(WORK, 'tck-console.log'));
  const child = spawn('java', args, { stdio: ['ignore', 'pipe', 'pipe'] });
  child.stderr.pipe(log, { end: false });
  const lines = readline.createInterface({ input: child.stdout });
  lines.on('line', (line) => {
    log.write(`${line}\n`);
    const m = / > ([^>]*) :: (SUCCESSFUL|FAILED|ABORTED|SKIPPED)/.exec(line);
    if (m) say(`${m[2] === 'SUCCESSFUL' ? 'ok  ' : m[2]!.toLowerCase().padEnd(4)} ${m[1]}`);
  });
  const stopChild = () => child.kill('SIGTERM');
  process.once('SIGINT', stopChild);
  process.once('SIGTERM', stopChild);
  return new Promise((resolve, reject) => {
    child.once('error', reject);
    child.once('close', (code) => {
      log.end();
      process.off('SIGINT', stopChild);
      process.off('SIGTERM', stopChild);
      resolve(code ?? 1);
    });
  });
}

/** What our side of each process looked like at the end (the run's database is removed after it). */
async function dumpProcesses(db: RunningConnector['db'], file: string) {
  const tables = ['negotiations', 'negotiation_history', 'transfers', 'transfer_history', 'outbox'];
  const dump: Record<string, unknown> = {};
  for (const table of tables) {
    if (await db.schema.hasTable(table)) dump[table] = await db(table).select('*');
  }
  fs.writeFileSync(file, JSON.stringify(dump, null, 1));
}

function readResults(reports: string): TckResult[] {
  const file = path.join(reports, 'TEST-junit-jupiter.xml');
  return fs.existsSync(file) ? parseJunitXml(fs.readFileSync(file, 'utf8')) : [];
}

/** Prints the report and writes the failure details; returns whether the run counts as passed. */
function report(reports: string, problems: string[], launcherExit: number, started: number): boolean {
  const results = readResults(reports);
  for (const line of formatReport(results)) process.stdout.write(`${line}\n`);
  const failures = results.filter((r) => r.outcome === 'failed');
  if (failures.length) {
    fs.writeFileSync(
      path.join(WORK, 'failures.txt'),
      failures.map((r) => `== ${r.id} ${r.title}\n${r.detail ?? ''}\n`).join('\n'),
    );
  }
  if (problems.length) {
    process.stdout.write(`\nThe TCK profile could not take these scripted steps:\n`);
    for (const p of problems) process.stdout.write(`  ${p}\n`);
  }
  process.stdout.write(
    `(${((Date.now() - started) / 1000).toFixed(1)} s; console log, reports and connector log in ${path.relative(process.cwd(), WORK) || WORK})\n`,
  );
  if (results.filter((r) => r.outcome !== 'skipped').length === 0) {
    say(`no TCK test ran (launcher exit ${launcherExit}); see .tck/tck-console.log`);
    return false;
  }
  return failures.length === 0 && launcherExit === 0;
}

async function main(): Promise<number> {
  const started = Date.now();
  const options = parseArgs(process.argv.slice(2));
  const lib = ensureJars();
  fs.mkdirSync(WORK, { recursive: true });
  const reports = path.join(WORK, 'reports');
  // What a run leaves is about that run only.
  for (const old of [reports, 'connector.log', 'failures.txt', 'processes.json', 'tck-console.log'])
    fs.rmSync(path.resolve(WORK, old), { recursive: true, force: true });

  const tckPort = await freePort();
  if (options.selfCheck) {
    say(`self-check: the TCK against its own connector (${options.groups.join(' ')})`);
    const exit = await runLauncher(lib, systemProperties({ selfCheck: true }, tckPort), options, reports);
    return report(reports, [], exit, started) ? 0 : 1;
  }

  say('starting the connector under test (embedded PostgreSQL and Temporal, TCK profile)…');
  // The one Authorization value the TCK sends; new for every run, known to nobody else.
  const authorization = `TCK ${randomBytes(24).toString('hex')}`;
  const cut = await startConnectorUnderTest(authorization, `http://127.0.0.1:${tckPort}`);
  say(
    `connector ${cut.connector.url} (${cut.connector.identity.did}) ready; running ${options.groups.join(' ')}`,
  );
  let passed: boolean;
  try {
    const exit = await runLauncher(
      lib,
      systemProperties(
        { selfCheck: false, url: cut.connector.url, did: cut.connector.identity.did, authorization },
        tckPort,
      ),
      options,
      reports,
    );
    await dumpProcesses(cut.connector.db, path.join(WORK, 'processes.json'));
    passed = report(reports, cut.profile.problems(), exit, started);
  } finally {
    // Processes may still be retrying towards the TCK, which is gone; what they throw while the
    // stack stops is no part of the result.
    const stray = (err: unknown) =>
      say(`while stopping: ${err instanceof Error ? err.message : String(err)}`);
    process.on('uncaughtException', stray);
    process.on('unhandledRejection', stray);
    await cut.stop();
  }
  return passed ? 0 : 1;
}

main().then(
  (code) => process.exit(code),
  (err: unknown) => {
    say(`failed: ${err instanceof Error ? err.message : String(err)}`);
    process.exit(1);
  },
);
