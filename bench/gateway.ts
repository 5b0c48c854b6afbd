/**
 * Gateway and data plane overhead (issue 5 §7): the same request sent directly to the backend
 * and through the consumer's gateway and the provider's data plane, in one run:
 *
 *   - one embedded PostgreSQL (ephemeral), one in-memory Temporal dev server and the authority
 *     stand-in, in this process tree;
 *   - the sample building backend in its own process (bench/gateway-backend.ts) with one server
 *     answering after 10 ms and one at once, both serving a generated buildings file
 *     (bench/gateway-buildings.ts) with a small building (`/points` answer ≈ 2 KB) and a large
 *     one (≈ 1 MiB);
 *   - provider and consumer connectors as separate processes (bench/connector-process.ts), each
 *     with its own database; on the provider one source, product and automatic offer per
 *     backend; the consumer negotiates both with a `connection_alias`, the transfers start by
 *     themselves, and one gateway API key is allowed on both connections;
 *   - the load generator in its own process (bench/gateway-load.ts): one undici Pool of
 *     --connections connections, a closed loop, each answer read to its last byte;
 *   - the floor: two bare Node proxy hops in their own processes (bench/gateway-floor-proxy.ts),
 *     the first forwarding to the second, the second to the backend, each reading the whole
 *     answer and sending it on: what any two Node hops cost on this machine, with no
 *     authentication, lookup, checking or logging.
 *
 * Per case (backend latency × answer size): warm-up and --seconds of `GET
 * /v1/buildings/{local id}/points` on the backend, then the same through the two bare hops (the
 * floor), then through `GET /gateway/{alias}/v1/buildings/{object}/points`. Printed: throughput
 * of each and its ratio to direct, p50/p99 of each and the added latency, each connector's peak RSS during the gateway run
 * (VmHWM, reset before it), the CPU each process spends per request, and the targets
 * with pass/fail marks. The last line of output is the result as JSON.
 *
 * Run: `npx tsx bench/gateway.ts`, or `npm run bench -- gateway`; about 2 minutes. Options:
 * --seconds=5, --warmup=1 (seconds), --connections=32, --cases=small-10ms,small-0ms,large-10ms,large-0ms,
 * --cpu-prof=<dir> (V8 CPU profiles of both connectors, written there when they stop; open them
 * in Chrome DevTools or summarise them with `npx tsx bench/gateway-profile.ts <file>`).
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { randomBytes } from 'node:crypto';
import { pathToFileURL } from 'node:url';
import { bundleWorkflows } from '../main.js';
import { ensureDatabase } from '../db/knex.js';
import { defaultTestDataDir, startEmbeddedPostgres } from '../dev/postgres.js';
import { resolveTemporalCli, startTemporalDevServer } from '../dev/temporal.js';
import { freePort, stopChild } from '../dev/processes.js';
import { startAuthority } from '../dev/authority/index.js';
import { writeBenchBuildings, type BenchBuildings } from './gateway-buildings.js';
import type { LoadJob, LoadResult } from './gateway-load.js';
import {
  childByComm,
  note,
  procMemory,
  resetPeakRss,
  startBackendProcess,
  startLoadProcess,
  startProxyHop,
  stopHelper,
  treeCpuMs,
} from './gateway-stack.js';
import {
  connectorMode,
  describeConnectors,
  ensureBuilt,
  startConnectorProcess,
  type ConnectorMode,
  type ConnectorProcess,
} from './connectors.js';
import { expectStatus } from '../dev/management-api.js';

const BACKEND_KEY = 'bench-backend-key';
const LATENCIES = [10, 0] as const;
type Latency = (typeof LATENCIES)[number];
type Size = 'small' | 'large';

interface Case {
  name: string;
  latencyMs: Latency;
  size: Size;
}

const CASES: Case[] = [
  { name: 'small-10ms', latencyMs: 10, size: 'small' },
  { name: 'small-0ms', latencyMs: 0, size: 'small' },
  { name: 'large-10ms', latencyMs: 10, size: 'large' },
  { name: 'large-0ms', latencyMs: 0, size: 'large' },
];

/** Issue 5 §7, on 2 cores. */
const TARGETS = { ratio10ms: 0.95, addedP50Ms: 1, ratio0ms: 0.15, ratioLarge: 0.5, rssMb: 300 };

/** Object ids on the provider (connection alias per backend, object per building and backend). */
const aliasOf = (latency: Latency) => `bench-${latency}ms`;
const objectOf = (latency: Latency, size: Size) => `bench-${size}-${latency}ms`;

// ---------------------------------------------------------------------------------------------
// Options and printing

interface Options {
  seconds: number;
  warmup: number;
  connections: number;
  cases: Case[];
  /** Directory for V8 CPU profiles of the connectors (written when they stop). */
  cpuProf: string | null;
  /** Compiled as in production (default), or the sources under tsx (`--tsx`). */
  connectors: ConnectorMode;
}

function parseOptions(args: string[]): Options {
  const value = (name: string) => args.find((a) => a.startsWith(`--${name}=`))?.split('=')[1];
  const number = (name: string, fallback: number, min: number) => {
    const n = Number(value(name) ?? fallback);
    if (!Number.isFinite(n) || n < min) throw new Error(`--${name} must be a number ≥ ${min}`);
    return n;
  };
  const names = value('cases')?.split(',') ?? CASES.map((c) => c.name);
  const unknown = names.filter((n) => !CASES.some((c) => c.name === n));
  if (unknown.length)
    throw new Error(`unknown case ${unknown.join(', ')} (known: ${CASES.map((c) => c.name).join(', ')})`);
  const connections = number('connections', 32, 1);
  if (!Number.isInteger(connections)) throw new Error('--connections must be a whole number');
  return {
    seconds: number('seconds', 5, 0.5),
    warmup: number('warmup', 1, 0),
    connections,
    cases: CASES.filter((c) => names.includes(c.name)),
    cpuProf: value('cpu-prof') ? path.resolve(value('cpu-prof')!) : null,
    connectors: connectorMode(args),
  };
}

const say = (line = '') => process.stdout.write(`${line}\n`);
const fixed = (v: number, digits = 1) => (Number.isFinite(v) ? v.toFixed(digits) : '–');
const kib = (bytes: number) =>
  bytes >= 1024 * 1024 ? `${fixed(bytes / 2 ** 20, 2)} MiB` : `${fixed(bytes / 1024, 1)} KiB`;

function table(header: string[], rows: Array<Array<string | number>>, alignLeft = 1) {
  const cells = [header, ...rows.map((r) => r.map(String))];
  const widths = header.map((_, i) => Math.max(...cells.map((r) => (r[i] ?? '').length)));
  for (const r of cells)
    say(
      '  ' +
        r
          .map((c, i) => (i < alignLeft ? c.padEnd(widths[i]!) : c.padStart(widths[i]!)))
          .join('  ')
          .trimEnd(),
    );
}

// ---------------------------------------------------------------------------------------------
// Setup on the connectors

/** Per backend: a source serving both buildings, a product of them, an automatic offer. */
async function publish(provider: ConnectorProcess, urls: Record<string, string>, buildings: BenchBuildings) {
  const call = provider.api;
  await expectStatus(
    'access policy',
    call('POST', '/api/v1/policies', {
      id: 'members',
      permissions: [
        {
          action: 'use',
          constraints: [{ left_operand: 'pl:membership', operator: 'eq', right_operand: 'active' }],
        },
      ],
    }),
    201,
  );
  await expectStatus(
    'contract policy',
    call('POST', '/api/v1/policies', { id: 'read-only', permissions: [{ action: 'read' }] }),
    201,
  );
  for (const latency of LATENCIES) {
    const id = aliasOf(latency);
    const objects = (['small', 'large'] as const).map((size) => objectOf(latency, size));
    await expectStatus(
      `source ${id}`,
      call('POST', '/api/v1/sources', {
        id,
        name: `backend answering after ${latency} ms`,
        objects,
        backend: {
          base_url: urls[String(latency)],
          auth_header_name: 'X-Api-Key',
          auth_header_value: BACKEND_KEY,
          allowed_methods: ['GET'],
        },
        links: (['small', 'large'] as const).map((size) => ({
          object: objectOf(latency, size),
          local_id: buildings[size].localId,
        })),
      }),
      201,
    );
    await expectStatus(
      `product ${id}`,
      call('POST', '/api/v1/products', { id, title: id, objects, source_id: id }),
      201,
    );
    await expectStatus(
      `offer ${id}`,
      call('POST', '/api/v1/offers', {
        id,
        asset_id: id,
        access_policy_id: 'members',
        contract_policy_id: 'read-only',
        approval: 'automatic',
      }),
      201,
    );
  }
}

/** Negotiates each offer with a connection alias and waits until its transfer has started. */
async function connect(consumer: ConnectorProcess, provider: ConnectorProcess): Promise<string> {
  for (const latency of LATENCIES) {
    await expectStatus(
      `negotiation ${aliasOf(latency)}`,
      consumer.api('POST', '/api/v1/negotiations', {
        counterparty_address: `${provider.url}/dsp`,
        counterparty_did: provider.did,
        offer_id: aliasOf(latency),
        connection_alias: aliasOf(latency),
      }),
      201,
    );
  }
  for (const latency of LATENCIES) {
    const alias = aliasOf(latency);
    const deadline = Date.now() + 60_000;
    for (;;) {
      const c = await consumer.api('GET', `/api/v1/connections/${alias}`);
      if (c.status === 200 && c.body.transfer_state === 'STARTED') break;
      if (Date.now() > deadline)
        throw new Error(`connection ${alias} did not start within 60 s: ${JSON.stringify(c.body)}`);
      await new Promise((r) => setTimeout(r, 100));
    }
  }
  const key = await expectStatus(
    'gateway key',
    consumer.api('POST', '/api/v1/api-keys', { name: 'bench application', scope: 'gateway' }),
    201,
  );
  for (const latency of LATENCIES)
    await expectStatus(
      `allow the application on ${aliasOf(latency)}`,
      consumer.api('PUT', `/api/v1/connections/${aliasOf(latency)}/apps/${key.body.id}`, { access: 'read' }),
      200,
    );
  return key.body.key as string;
}

// ---------------------------------------------------------------------------------------------
// The run

interface CaseResult {
  case: Case;
  direct: LoadResult;
  /** Through the two bare proxy hops. */
  floor: LoadResult;
  through: LoadResult;
  ratio: number;
  floorRatio: number;
  addedP50: number;
  addedP99: number;
  /** Peak RSS of each connector during the gateway run (warm-up included), MB. */
  peakRssMb: { provider: number; consumer: number };
  /** RSS of each connector right before the gateway run, MB. */
  beforeRssMb: { provider: number; consumer: number };
  /** CPU ms per answered request, per process, for each run (warm-up included). */
  cpuMsPerRequest: Record<Way, Record<string, number>>;
  /** Share of one core each process used during each run. */
  coreShare: Record<Way, Record<string, number>>;
}

const WAYS = ['direct', 'floor', 'through'] as const;
type Way = (typeof WAYS)[number];
const WAY_LABEL: Record<Way, string> = { direct: 'direct', floor: 'floor', through: 'gateway' };

export async function run(args: string[] = []): Promise<void> {
  const options = parseOptions(args);
  if (options.connectors === 'dist') ensureBuilt((line) => say(`[bench] ${line}`));
  const started = Date.now();
  const loadBefore = os.loadavg();
  say(
    `gateway bench: Node ${process.version}, ${os.availableParallelism()} cores, load average ` +
      `${loadBefore.map((l) => l.toFixed(2)).join(' ')} at start; ${options.connections} connections, ` +
      `${options.warmup} s warm-up + ${options.seconds} s per run`,
  );

  const stops: Array<[string, () => Promise<unknown>]> = [];
  const remove = (dir: string) => () => Promise.resolve(fs.rmSync(dir, { recursive: true, force: true }));
  const workDir = fs.mkdtempSync(path.join(os.tmpdir(), 'bench-gateway-'));
  stops.push(['work directory', remove(workDir)]);
  const pgDataDir = defaultTestDataDir();
  stops.push(['postgres data', remove(pgDataDir)]);

  try {
    const buildings = writeBenchBuildings(workDir);
    const cli = await resolveTemporalCli({ explicit: process.env.TEMPORAL_CLI ?? null, say: note });
    const [postgres, temporal, bundle] = await Promise.all([
      startEmbeddedPostgres({ dataDir: pgDataDir, ephemeral: true }),
      startTemporalDevServer({ cli, headless: true }),
      bundleWorkflows(),
    ]);
    stops.push(['postgres', () => postgres.stop()]);
    stops.push(['temporal', () => temporal.stop()]);
    const bundlePath = path.join(workDir, 'workflow-bundle.js');
    if (!('code' in bundle)) throw new Error('expected a workflow bundle with code');
    fs.writeFileSync(bundlePath, bundle.code);
    const authority = await startAuthority();
    stops.push(['authority', () => authority.close()]);
    const backend = await startBackendProcess(buildings.file, BACKEND_KEY, [...LATENCIES]);
    stops.push(['backend', () => stopHelper(backend.child)]);
    const load = await startLoadProcess();
    stops.push(['load generator', () => stopHelper(load.child)]);
    const floorRoutes = (
      origin: (latency: Latency) => string,
      upstreamPrefix: (latency: Latency) => string,
    ) => LATENCIES.map((l): [string, string, string] => [`/${l}/`, origin(l), upstreamPrefix(l)]);
    const hop2 = await startProxyHop(
      floorRoutes(
        (l) => backend.urls[String(l)]!,
        () => '/',
      ),
      { 'x-api-key': BACKEND_KEY },
      options.connections,
    );
    stops.push(['floor hop 2', () => stopHelper(hop2.child)]);
    const hop1 = await startProxyHop(
      floorRoutes(
        () => hop2.url,
        (l) => `/${l}/`,
      ),
      {},
      options.connections,
    );
    stops.push(['floor hop 1', () => stopHelper(hop1.child)]);

    const keyEncryptionKey = randomBytes(32).toString('base64');
    const connectors: ConnectorProcess[] = [];
    stops.push([
      'connectors',
      () => Promise.all(connectors.map((c) => stopChild(c.child, 'SIGTERM', 10_000))),
    ]);
    const [provider, consumer] = await Promise.all(
      (['provider', 'consumer'] as const).map(async (name) => {
        const database = `bench_gw_${name}`;
        await ensureDatabase(postgres.adminUrl, database);
        const port = await freePort();
        const c = await startConnectorProcess(
          name,
          {
            DATABASE_URL: postgres.urlFor(database),
            PORT: String(port),
            PUBLIC_URL: `http://127.0.0.1:${port}`,
            TEMPORAL_ADDRESS: temporal.address,
            TEMPORAL_TASK_QUEUE: `bench-gw-${name}`,
            DID_WEB_ALLOW_HTTP: 'true',
            AUTHORITY_URL: authority.url,
            KEY_ENCRYPTION_KEY: keyEncryptionKey,
            LOG_LEVEL: 'warn',
            DEMO_BACKEND: '0',
            DATA_DIR: path.join(workDir, name),
            BENCH_WORKFLOW_BUNDLE: bundlePath,
          },
          options.connectors,
          options.cpuProf ? ['--cpu-prof', `--cpu-prof-dir=${path.join(options.cpuProf, name)}`] : [],
        );
        connectors.push(c);
        return c;
      }),
    );
    for (const c of [provider!, consumer!])
      authority.upsert({ did: c.did, name: c.name, roles: ['researcher'], active: true });
    await publish(provider!, backend.urls, buildings);
    const appKey = await connect(consumer!, provider!);
    note(`stack ready in ${((Date.now() - started) / 1000).toFixed(1)} s`);

    const jobs = (c: Case): Record<Way, LoadJob> => {
      const common = {
        connections: options.connections,
        warmupSeconds: options.warmup,
        seconds: options.seconds,
      };
      return {
        direct: {
          ...common,
          origin: backend.urls[String(c.latencyMs)]!,
          path: `/v1/buildings/${buildings[c.size].localId}/points`,
          headers: { 'x-api-key': BACKEND_KEY, accept: 'application/json' },
        },
        floor: {
          ...common,
          origin: hop1.url,
          path: `/${c.latencyMs}/v1/buildings/${buildings[c.size].localId}/points`,
          headers: { accept: 'application/json' },
        },
        through: {
          ...common,
          origin: consumer!.url,
          path: `/gateway/${aliasOf(c.latencyMs)}/v1/buildings/${objectOf(c.latencyMs, c.size)}/points`,
          headers: { authorization: `Bearer ${appKey}`, accept: 'application/json' },
        },
      };
    };

    // The same answer every way: as many points, and the gateway's carries the object id.
    for (const c of options.cases) {
      const { direct, floor, through } = jobs(c);
      const read = async (job: LoadJob) => {
        const res = await fetch(`${job.origin}${job.path}`, { headers: job.headers });
        if (res.status !== 200)
          throw new Error(`${c.name}: ${job.origin}${job.path} answered ${res.status}: ${await res.text()}`);
        return (await res.json()) as { building_id: string; points: unknown[] };
      };
      const [d, f, t] = await Promise.all([read(direct), read(floor), read(through)]);
      if (d.points.length !== t.points.length || t.building_id !== objectOf(c.latencyMs, c.size))
        throw new Error(
          `${c.name}: the gateway answered ${t.points.length} points, the backend ${d.points.length}`,
        );
      if (JSON.stringify(f.points) !== JSON.stringify(d.points))
        throw new Error(`${c.name}: the floor's points differ from the backend's`);
    }

    const postgresPid = childByComm('postgres');
    const temporalPid = childByComm('temporal');
    const roots: Record<string, number> = {
      load: load.pid,
      backend: backend.pid,
      consumer: consumer!.pid,
      provider: provider!.pid,
      hop1: hop1.pid,
      hop2: hop2.pid,
      ...(postgresPid ? { postgres: postgresPid } : {}),
      ...(temporalPid ? { temporal: temporalPid } : {}),
    };
    const cpuPer = (before: Record<string, number>, after: Record<string, number>, r: LoadResult) => {
      const requests = r.ok + r.warmup.ok;
      const seconds = r.seconds + r.warmup.seconds;
      const perRequest: Record<string, number> = {};
      const share: Record<string, number> = {};
      for (const name of Object.keys(roots)) {
        const used = after[name]! - before[name]!;
        perRequest[name] = requests ? used / requests : NaN;
        share[name] = used / 1000 / seconds;
      }
      return { perRequest, share };
    };

    const startRssMb = {
      provider: (procMemory(provider!.pid)?.rssKb ?? NaN) / 1024,
      consumer: (procMemory(consumer!.pid)?.rssKb ?? NaN) / 1024,
    };
    let resetWorks = true;
    const results: CaseResult[] = [];
    for (const c of options.cases) {
      const { direct, floor, through } = jobs(c);
      note(`${c.name}: direct…`);
      const cpu0 = treeCpuMs(roots);
      const d = await load.run(direct);
      const cpu1 = treeCpuMs(roots);
      note(`${c.name}: through the floor's two bare hops…`);
      const f = await load.run(floor);
      const cpuF = treeCpuMs(roots);
      for (const conn of [provider!, consumer!]) resetWorks = resetPeakRss(conn.pid) && resetWorks;
      const rss = (conn: ConnectorProcess) => (procMemory(conn.pid)?.rssKb ?? NaN) / 1024;
      const beforeRssMb = { provider: rss(provider!), consumer: rss(consumer!) };
      note(`${c.name}: through the gateway…`);
      const t = await load.run(through);
      const cpu2 = treeCpuMs(roots);
      const peak = (conn: ConnectorProcess) => (procMemory(conn.pid)?.hwmKb ?? NaN) / 1024;
      const cd = cpuPer(cpu0, cpu1, d);
      const cf = cpuPer(cpu1, cpuF, f);
      const ct = cpuPer(cpuF, cpu2, t);
      results.push({
        case: c,
        direct: d,
        floor: f,
        through: t,
        ratio: t.perSecond / d.perSecond,
        floorRatio: f.perSecond / d.perSecond,
        addedP50: t.p50 - d.p50,
        addedP99: t.p99 - d.p99,
        peakRssMb: { provider: peak(provider!), consumer: peak(consumer!) },
        beforeRssMb,
        cpuMsPerRequest: { direct: cd.perRequest, floor: cf.perRequest, through: ct.perRequest },
        coreShare: { direct: cd.share, floor: cf.share, through: ct.share },
      });
    }
    const loadAfter = os.loadavg();

    // ----- Report
    say();
    say(
      'GET …/points: directly on the backend, through the floor (two bare Node proxy hops) and ' +
        `through gateway + data plane (${options.connections} connections, closed loop; latency = ` +
        'request → last byte, ms; ratio = req/s against direct)',
    );
    const p50p99 = (r: LoadResult) => `${fixed(r.p50, 2)} / ${fixed(r.p99, 2)}`;
    table(
      [
        'case',
        'answer',
        'direct req/s',
        'floor req/s',
        'ratio',
        'gateway req/s',
        'ratio',
        'direct p50/p99',
        'floor p50/p99',
        'gateway p50/p99',
        'gateway added p50/p99',
      ],
      results.map((r) => [
        r.case.name,
        kib(r.direct.answerBytes),
        fixed(r.direct.perSecond, 0),
        fixed(r.floor.perSecond, 0),
        `${fixed(r.floorRatio, 2)}×`,
        fixed(r.through.perSecond, 0),
        `${fixed(r.ratio, 2)}×`,
        p50p99(r.direct),
        p50p99(r.floor),
        p50p99(r.through),
        `${fixed(r.addedP50, 2)} / ${fixed(r.addedP99, 2)}`,
      ]),
    );
    for (const r of results)
      for (const way of WAYS)
        if (r[way].failed)
          say(`  ${r.case.name} ${WAY_LABEL[way]}: ${r[way].failed} failed, first: ${r[way].firstFailure}`);
    say(
      `  (answer: the backend's; the gateway's differs by the building id only. Small building ` +
        `${buildings.small.points} points, large ${buildings.large.points})`,
    );

    say();
    say(
      `RSS per connector, MB: before each gateway run → its peak (VmHWM${resetWorks ? ', reset before the run' : ' since start: the kernel refused the reset'}); ` +
        `after start-up: provider ${fixed(startRssMb.provider, 0)}, consumer ${fixed(startRssMb.consumer, 0)}`,
    );
    table(
      ['case', 'provider (data plane)', 'consumer (gateway)'],
      results.map((r) => [
        r.case.name,
        `${fixed(r.beforeRssMb.provider, 0)} → ${fixed(r.peakRssMb.provider, 0)}`,
        `${fixed(r.beforeRssMb.consumer, 0)} → ${fixed(r.peakRssMb.consumer, 0)}`,
      ]),
    );

    say();
    say(
      'CPU per request, ms (warm-up included; in parentheses: share of one core during the run). ' +
        '"all" below 200 % means other work on the machine took the rest of the 2 cores; hop1 and ' +
        "hop2 are the floor's two bare proxies",
    );
    const names = Object.keys(roots);
    const sum = (m: Record<string, number>) => Object.values(m).reduce((a, b) => a + b, 0);
    /**
     * Requests per second this way could reach with the machine to itself: CPU-bound (every
     * process's CPU per request on all cores, each Node process on one) and, with a slow
     * backend, latency-bound (each connection waits for the backend).
     */
    const ceiling = (cpu: Record<string, number>, latencyMs: number) =>
      Math.min(
        (1000 * os.availableParallelism()) / sum(cpu),
        ...Object.entries(cpu)
          .filter(([name]) => name !== 'postgres' && name !== 'temporal')
          .map(([, ms]) => 1000 / ms),
        latencyMs > 0 ? (1000 * options.connections) / latencyMs : Infinity,
      );
    table(
      ['case', 'way', ...names, 'all'],
      results.flatMap((r) =>
        WAYS.map((way) => [
          way === 'direct' ? r.case.name : '',
          WAY_LABEL[way],
          ...names.map(
            (n) => `${fixed(r.cpuMsPerRequest[way][n]!, 3)} (${fixed(100 * r.coreShare[way][n]!, 0)} %)`,
          ),
          `${fixed(sum(r.cpuMsPerRequest[way]), 3)} (${fixed(100 * sum(r.coreShare[way]), 0)} %)`,
        ]),
      ),
      2,
    );
    say(
      `  CPU-bound ceiling with ${os.availableParallelism()} free cores (all processes' CPU per request, ` +
        'none above one core; the 10 ms backend also caps direct at connections / latency): ' +
        results
          .map((r) => {
            const [d, f, t] = WAYS.map((way) => ceiling(r.cpuMsPerRequest[way], r.case.latencyMs));
            return (
              `${r.case.name} direct ${fixed(d!, 0)}, floor ${fixed(f!, 0)} (${fixed(f! / d!, 2)}×), ` +
              `gateway ${fixed(t!, 0)} req/s (${fixed(t! / d!, 2)}×)`
            );
          })
          .join('; '),
    );

    say();
    say('targets (issue 5 §7, on 2 cores)');
    const mark = (ok: boolean) => (ok ? 'pass' : 'FAIL');
    const targets: Array<[string, string, boolean]> = [];
    for (const r of results) {
      const { name, latencyMs, size } = r.case;
      if (size === 'small' && latencyMs === 10) {
        targets.push([
          `${name}: ≥ ${TARGETS.ratio10ms}× direct throughput`,
          `${fixed(r.ratio, 2)}×`,
          r.ratio >= TARGETS.ratio10ms,
        ]);
        targets.push([
          `${name}: ≤ +${TARGETS.addedP50Ms} ms p50`,
          `+${fixed(r.addedP50, 2)} ms`,
          r.addedP50 <= TARGETS.addedP50Ms,
        ]);
      }
      if (size === 'small' && latencyMs === 0)
        targets.push([
          `${name}: ≥ ${100 * TARGETS.ratio0ms} % of direct throughput`,
          `${fixed(100 * r.ratio, 0)} %`,
          r.ratio >= TARGETS.ratio0ms,
        ]);
      if (size === 'large') {
        targets.push([
          `${name}: ≥ ${100 * TARGETS.ratioLarge} % of direct throughput`,
          `${fixed(100 * r.ratio, 0)} %`,
          r.ratio >= TARGETS.ratioLarge,
        ]);
        const rss = Math.max(r.peakRssMb.provider, r.peakRssMb.consumer);
        targets.push([
          `${name}: < ${TARGETS.rssMb} MB RSS per connector (peak)`,
          `${fixed(rss, 0)} MB`,
          rss < TARGETS.rssMb,
        ]);
      }
    }
    for (const r of results)
      if (r.direct.failed || r.through.failed)
        targets.push([
          `${r.case.name}: no failed requests`,
          String(r.direct.failed + r.through.failed),
          false,
        ]);
    table(
      ['target', 'measured', ''],
      targets.map(([t, v, ok]) => [t, v, mark(ok)]),
    );
    say(
      '  the floor in the same run (two bare Node hops, nothing checked): ' +
        results
          .map(
            (r) =>
              `${r.case.name} ${fixed(r.floorRatio, 2)}×, +${fixed(r.floor.p50 - r.direct.p50, 2)} ms p50`,
          )
          .join('; '),
    );
    say(
      `  load average ${loadBefore.map((l) => l.toFixed(2)).join(' ')} at start, ` +
        `${loadAfter.map((l) => l.toFixed(2)).join(' ')} at end (other work on the same cores skews the figures)`,
    );
    say(`  (${describeConnectors(options.connectors)})`);

    const round = (v: number, digits = 3) => (Number.isFinite(v) ? Number(v.toFixed(digits)) : null);
    const load3 = (r: LoadResult) => ({
      perSecond: round(r.perSecond, 1),
      ok: r.ok,
      failed: r.failed,
      answerBytes: round(r.answerBytes, 0),
      p50: round(r.p50),
      p90: round(r.p90),
      p99: round(r.p99),
      mean: round(r.mean),
      max: round(r.max),
    });
    const result = {
      bench: 'gateway',
      node: process.version,
      cores: os.availableParallelism(),
      loadAverage: { start: loadBefore, end: loadAfter },
      options: { seconds: options.seconds, warmup: options.warmup, connections: options.connections },
      buildings: { small: buildings.small, large: buildings.large },
      startRssMb: { provider: round(startRssMb.provider, 0), consumer: round(startRssMb.consumer, 0) },
      cases: results.map((r) => ({
        name: r.case.name,
        backendLatencyMs: r.case.latencyMs,
        direct: load3(r.direct),
        floor: load3(r.floor),
        through: load3(r.through),
        ratio: round(r.ratio),
        floorRatio: round(r.floorRatio),
        cpuCeiling: {
          direct: round(ceiling(r.cpuMsPerRequest.direct, r.case.latencyMs), 0),
          floor: round(ceiling(r.cpuMsPerRequest.floor, r.case.latencyMs), 0),
          through: round(ceiling(r.cpuMsPerRequest.through, r.case.latencyMs), 0),
          ratio: round(
            ceiling(r.cpuMsPerRequest.through, r.case.latencyMs) /
              ceiling(r.cpuMsPerRequest.direct, r.case.latencyMs),
          ),
        },
        addedP50Ms: round(r.addedP50),
        addedP99Ms: round(r.addedP99),
        peakRssMb: { provider: round(r.peakRssMb.provider, 0), consumer: round(r.peakRssMb.consumer, 0) },
        beforeRssMb: {
          provider: round(r.beforeRssMb.provider, 0),
          consumer: round(r.beforeRssMb.consumer, 0),
        },
        cpuMsPerRequest: Object.fromEntries(
          WAYS.map((way) => [
            way,
            Object.fromEntries(Object.entries(r.cpuMsPerRequest[way]).map(([k, v]) => [k, round(v)])),
          ]),
        ),
        coreShare: Object.fromEntries(
          WAYS.map((way) => [
            way,
            Object.fromEntries(Object.entries(r.coreShare[way]).map(([k, v]) => [k, round(v, 2)])),
          ]),
        ),
      })),
      targets: Object.fromEntries(targets.map(([name, value, ok]) => [name, { value, pass: ok }])),
      seconds: (Date.now() - started) / 1000,
    };
    say();
    say(JSON.stringify(result));
  } finally {
    for (const [name, stop] of stops.reverse())
      await stop().catch((err: unknown) => note(`while stopping ${name}: ${String(err)}`));
  }
}

if (import.meta.url === pathToFileURL(path.resolve(process.argv[1] ?? '')).href) {
  await run(process.argv.slice(2));
}
