/**
 * Contract negotiation latency and throughput between two connectors (issue 4 §7), next to the
 * floor of the same Temporal server, in one run:
 *
 *   - one embedded PostgreSQL (ephemeral), one in-memory Temporal dev server, the authority
 *     stand-in and the sample building backend, in this process tree;
 *   - the provider and the consumer as separate processes (bench/connector-process.ts), each
 *     with its own database and task queue, did:web DIDs on loopback, both active members;
 *   - on the provider a source, a product, an access and a contract policy and an offer with
 *     automatic approval;
 *   - negotiations started with the consumer's POST /api/v1/negotiations: a warm-up, then one
 *     client in sequence, then several clients at once;
 *   - the floor: a trivial workflow (bench/floor-workflow.ts) started with update-with-start,
 *     three Updates and its result, on a worker in this process.
 *
 * The time of a negotiation runs from just before the POST until both read models say
 * FINALIZED. It is observed without polling: a trigger this bench adds to the `negotiations`
 * table of each bench database sends a NOTIFY when a row reaches FINALIZED or TERMINATED, and
 * this process LISTENs on both databases, so it learns of each commit within a fraction of a
 * millisecond and adds no load to the connectors (a failure: not FINALIZED on both sides within
 * --timeout-ms, TERMINATED on either side, or a POST not answered 201). `--poll=2` instead polls
 * the consumer's GET /api/v1/negotiations/{id} every 2 ms; that covers both sides as long as the
 * provider records FINALIZED before it sends the event, as the workflow does now.
 *
 * Also: each connector's peak RSS (VmHWM from /proc) and JS heap, the CPU each component spends
 * per negotiation, where the time goes (read-model history of both sides; the Temporal event
 * histories of the median sequential negotiations, with each instant attributed to one cause),
 * and the targets with pass/fail marks.
 *
 * Run: `npx tsx bench/negotiation.ts`, or `npm run bench -- negotiation`; about 2.5 minutes.
 * Options: --warmup=20, --sequential=300 and --concurrent=400 (at most this many; each of the two
 * runs also stops starting new negotiations after --phase-seconds=45), --clients=4, --floor=200,
 * --timeout-ms=10000, --poll=2, --tsx (connectors from the TypeScript sources; by default they run
 * compiled with the production flags, built first if dist/ is stale: bench/connectors.ts). The
 * last line of output is the result as JSON.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { randomBytes, randomUUID } from 'node:crypto';
import { spawnSync } from 'node:child_process';
import { fileURLToPath, pathToFileURL } from 'node:url';
import pg from 'pg';
import { Client, Connection, WithStartWorkflowOperation } from '@temporalio/client';
import { DefaultLogger, NativeConnection, Runtime, Worker, bundleWorkflowCode } from '@temporalio/worker';
import { bundleWorkflows } from '../main.js';
import { ensureDatabase } from '../db/knex.js';
import { defaultTestDataDir, startEmbeddedPostgres } from '../dev/postgres.js';
import { resolveTemporalCli, startTemporalDevServer } from '../dev/temporal.js';
import { freePort, stopChild } from '../dev/processes.js';
import { startAuthority } from '../dev/authority/index.js';
import { startBuildingBackend } from '../dev/building-backend/index.js';
import { FLOOR_STEPS, floorStartUpdate, floorStepUpdate } from './floor-workflow.js';
import { expectStatus, type Answer } from '../dev/management-api.js';
import {
  connectorMode,
  describeConnectors,
  ensureBuilt,
  startConnectorProcess as launchConnector,
  type ConnectorMode,
  type ConnectorProcess as LaunchedConnector,
} from './connectors.js';

const here = path.dirname(fileURLToPath(import.meta.url));
const FLOOR_WORKFLOWS = path.join(here, 'floor-workflow.ts');
const SODA = '0363.10.0000000101';
const NOTIFY_CHANNEL = 'bench_negotiation';

const TARGETS = { p50Ms: 100, p90Ms: 150, perSecond: 25, rssMb: 250 };

// ---------------------------------------------------------------------------------------------
// Options, statistics, printing

interface Options {
  warmup: number;
  sequential: number;
  concurrent: number;
  clients: number;
  floor: number;
  /** Each negotiation run (1 client, N clients) stops starting new ones after this long. */
  phaseSeconds: number;
  timeoutMs: number;
  /** Compiled as in production (default), or the sources under tsx. */
  connectors: ConnectorMode;
  /** Poll the consumer's API every this many ms instead of listening for commits. */
  pollMs: number | null;
}

function parseOptions(args: string[]): Options {
  const value = (name: string) => args.find((a) => a.startsWith(`--${name}=`))?.split('=')[1];
  const count = (name: string, fallback: number) => {
    const n = Number(value(name) ?? fallback);
    if (!Number.isInteger(n) || n < 0) throw new Error(`--${name} must be a whole number`);
    return n;
  };
  const poll = args.includes('--poll') ? 2 : value('poll');
  return {
    warmup: count('warmup', 20),
    sequential: count('sequential', 300),
    concurrent: count('concurrent', 400),
    clients: Math.max(1, count('clients', 4)),
    floor: count('floor', 200),
    phaseSeconds: count('phase-seconds', 45),
    timeoutMs: count('timeout-ms', 10_000),
    connectors: connectorMode(args),
    pollMs: poll === undefined ? null : Math.max(0, Number(poll)),
  };
}

interface Summary {
  n: number;
  p50: number;
  p90: number;
  p99: number;
  mean: number;
  max: number;
}

/** Nearest-rank quantile of sorted values. */
function quantile(sorted: number[], q: number): number {
  if (sorted.length === 0) return NaN;
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1))]!;
}

function summarize(values: number[]): Summary {
  const sorted = [...values].sort((a, b) => a - b);
  return {
    n: sorted.length,
    p50: quantile(sorted, 0.5),
    p90: quantile(sorted, 0.9),
    p99: quantile(sorted, 0.99),
    mean: sorted.reduce((s, v) => s + v, 0) / (sorted.length || 1),
    max: sorted[sorted.length - 1] ?? NaN,
  };
}

const median = (values: number[]) =>
  quantile(
    [...values].sort((a, b) => a - b),
    0.5,
  );
const ms = (v: number, digits = 1) => (Number.isFinite(v) ? v.toFixed(digits) : '–');
const mb = (kb: number) => kb / 1024;
const say = (line = '') => process.stdout.write(`${line}\n`);
const note = (line: string) => process.stderr.write(`[bench] ${line}\n`);

function table(header: string[], rows: Array<Array<string | number>>, alignLeft = 1) {
  const cells = [header, ...rows.map((r) => r.map(String))];
  const widths = header.map((_, i) => Math.max(...cells.map((r) => (r[i] ?? '').length)));
  for (const r of cells) {
    say(
      '  ' +
        r
          .map((c, i) => (i < alignLeft ? c.padEnd(widths[i]!) : c.padStart(widths[i]!)))
          .join('  ')
          .trimEnd(),
    );
  }
}

// ---------------------------------------------------------------------------------------------
// /proc: memory and CPU of the processes involved

const CLK_TCK = Number(spawnSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).stdout.trim()) || 100;

function procMemory(pid: number): { rssKb: number; hwmKb: number } | null {
  try {
    const status = fs.readFileSync(`/proc/${pid}/status`, 'utf8');
    const field = (name: string) => Number(new RegExp(`^${name}:\\s+(\\d+) kB`, 'm').exec(status)?.[1] ?? 0);
    return { rssKb: field('VmRSS'), hwmKb: field('VmHWM') };
  } catch {
    return null;
  }
}

interface ProcStat {
  pid: number;
  ppid: number;
  comm: string;
  ticks: number;
}

function procStat(pid: number): ProcStat | null {
  try {
    const text = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
    const close = text.lastIndexOf(')');
    const comm = text.slice(text.indexOf('(') + 1, close);
    const f = text
      .slice(close + 2)
      .split(' ')
      .map((x) => Number(x));
    // After the comm: state(0) ppid(1) … utime(11) stime(12) cutime(13) cstime(14).
    return { pid, ppid: f[1]!, comm, ticks: f[11]! + f[12]! + f[13]! + f[14]! };
  } catch {
    return null;
  }
}

function allProcs(): ProcStat[] {
  return fs
    .readdirSync('/proc')
    .filter((d) => /^\d+$/.test(d))
    .map((d) => procStat(Number(d)))
    .filter((p): p is ProcStat => p !== null);
}

/** CPU milliseconds a process and all its descendants have used so far. */
function treeCpuMs(root: number, procs: ProcStat[]): number {
  let ticks = 0;
  const queue = [root];
  while (queue.length) {
    const pid = queue.shift()!;
    for (const p of procs) {
      if (p.pid === pid) ticks += p.ticks;
      if (p.ppid === pid) queue.push(p.pid);
    }
  }
  return (ticks * 1000) / CLK_TCK;
}

type Component = { name: string; pid: number | null };

function cpuSnapshot(components: Component[]): Record<string, number> {
  const procs = allProcs();
  const out: Record<string, number> = {};
  for (const c of components) {
    if (c.pid === null) {
      const u = process.cpuUsage();
      out[c.name] = (u.user + u.system) / 1000;
    } else out[c.name] = treeCpuMs(c.pid, procs);
  }
  return out;
}

/** Our direct children by command name (the Temporal CLI and the postmaster). */
function childByComm(comm: string): number | null {
  return allProcs().find((p) => p.ppid === process.pid && p.comm === comm)?.pid ?? null;
}

// ---------------------------------------------------------------------------------------------
// Connector processes

interface ConnectorProcess extends LaunchedConnector {
  databaseUrl: string;
  /** VmHWM right after start (start-up peak). */
  startHwmKb: number;
  /** Highest VmRSS sampled while the bench ran. */
  maxRssKb: number;
}

async function startConnectorProcess(
  name: string,
  env: Record<string, string>,
  databaseUrl: string,
  mode: ConnectorMode,
): Promise<ConnectorProcess> {
  const c = await launchConnector(name, { ...env, DATABASE_URL: databaseUrl }, mode);
  return { ...c, databaseUrl, startHwmKb: procMemory(c.pid)?.hwmKb ?? 0, maxRssKb: 0 };
}

/** A source on the sample backend, a product, the access and contract policies and an offer. */
async function publishOffer(provider: ConnectorProcess, backendUrl: string, offerId: string) {
  const call = provider.api;
  await expectStatus(
    'create source',
    call('POST', '/api/v1/sources', {
      id: 'campus',
      name: 'Campus',
      objects: [SODA],
      backend: {
        base_url: backendUrl,
        auth_header_name: 'X-Api-Key',
        auth_header_value: 'k',
        allowed_methods: ['GET'],
      },
      links: [{ object: SODA, local_id: 'soda-hall' }],
    }),
    201,
  );
  await expectStatus(
    'create access policy',
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
    'create contract policy',
    call('POST', '/api/v1/policies', { id: 'read-only', permissions: [{ action: 'read' }] }),
    201,
  );
  await expectStatus(
    'create product',
    call('POST', '/api/v1/products', {
      id: `product-${offerId}`,
      title: 'Soda Hall',
      objects: [SODA],
      source_id: 'campus',
    }),
    201,
  );
  await expectStatus(
    'create offer',
    call('POST', '/api/v1/offers', {
      id: offerId,
      asset_id: `product-${offerId}`,
      access_policy_id: 'members',
      contract_policy_id: 'read-only',
      approval: 'automatic',
    }),
    201,
  );
  return { offerId, datasetId: `product-${offerId}` };
}

// ---------------------------------------------------------------------------------------------
// Completion: NOTIFY on commit of FINALIZED / TERMINATED, from both databases

/** Installs the bench's trigger on a connector database (after its migrations ran). */
async function installNotifyTrigger(databaseUrl: string) {
  const client = new pg.Client({ connectionString: databaseUrl });
  await client.connect();
  try {
    await client.query(`
      CREATE OR REPLACE FUNCTION bench_negotiation_notify() RETURNS trigger AS $$
      BEGIN
        IF NEW.state IN ('FINALIZED', 'TERMINATED')
           AND (TG_OP = 'INSERT' OR OLD.state IS DISTINCT FROM NEW.state) THEN
          PERFORM pg_notify('${NOTIFY_CHANNEL}', NEW.role || ' ' || NEW.state || ' ' || NEW.consumer_pid);
        END IF;
        RETURN NEW;
      END $$ LANGUAGE plpgsql;
      DROP TRIGGER IF EXISTS bench_negotiation_notify ON negotiations;
      CREATE TRIGGER bench_negotiation_notify AFTER INSERT OR UPDATE ON negotiations
        FOR EACH ROW EXECUTE FUNCTION bench_negotiation_notify();
    `);
  } finally {
    await client.end();
  }
}

interface Completion {
  consumer?: number;
  provider?: number;
  terminated?: string;
  wake?: () => void;
}

class Completions {
  private readonly entries = new Map<string, Completion>();
  private readonly listeners: pg.Client[] = [];

  async listen(databaseUrl: string) {
    const client = new pg.Client({ connectionString: databaseUrl });
    await client.connect();
    client.on('notification', (msg) => {
      const at = performance.now();
      const [role, state, consumerPid] = (msg.payload ?? '').split(' ');
      if (!consumerPid) return;
      this.note(consumerPid, role === 'provider' ? 'provider' : 'consumer', state ?? '', at);
    });
    await client.query(`LISTEN ${NOTIFY_CHANNEL}`);
    this.listeners.push(client);
  }

  private entry(consumerPid: string): Completion {
    let e = this.entries.get(consumerPid);
    if (!e) this.entries.set(consumerPid, (e = {}));
    return e;
  }

  note(consumerPid: string, side: 'consumer' | 'provider', state: string, at: number) {
    const e = this.entry(consumerPid);
    if (state === 'TERMINATED') e.terminated = `TERMINATED on the ${side} side`;
    else e[side] ??= at;
    e.wake?.();
  }

  /** Both sides FINALIZED (the later commit's time), a termination, or null at the deadline. */
  async wait(consumerPid: string, deadline: number): Promise<Completion | null> {
    const e = this.entry(consumerPid);
    try {
      while (!e.terminated && (e.consumer === undefined || e.provider === undefined)) {
        const left = deadline - performance.now();
        if (left <= 0) return null;
        await new Promise<void>((resolve) => {
          const timer = setTimeout(resolve, left);
          e.wake = () => {
            clearTimeout(timer);
            resolve();
          };
        });
      }
      return e;
    } finally {
      e.wake = undefined;
      this.entries.delete(consumerPid);
    }
  }

  async close() {
    await Promise.all(this.listeners.map((c) => c.end().catch(() => undefined)));
  }
}

// ---------------------------------------------------------------------------------------------
// Negotiations

interface Outcome {
  ok: boolean;
  error?: string;
  /** POST → FINALIZED on both sides. */
  ms: number;
  /** POST → 201. */
  postMs: number;
  consumerPid: string | null;
  /** Wall-clock time of the POST (epoch ms, sub-ms precision). */
  startedAt: number;
}

interface Negotiator {
  (): Promise<Outcome>;
}

function negotiator(
  consumer: ConnectorProcess,
  provider: ConnectorProcess,
  offer: { offerId: string; datasetId: string },
  completions: Completions,
  options: Options,
): Negotiator {
  const body = {
    counterparty_address: `${provider.url}/dsp`,
    counterparty_did: provider.did,
    offer_id: offer.offerId,
    dataset_id: offer.datasetId,
  };
  return async () => {
    const t0 = performance.now();
    const startedAt = performance.timeOrigin + t0;
    const deadline = t0 + options.timeoutMs;
    const fail = (error: string, consumerPid: string | null = null, postMs = NaN): Outcome => ({
      ok: false,
      error,
      ms: performance.now() - t0,
      postMs,
      consumerPid,
      startedAt,
    });
    let res: Answer;
    try {
      res = await consumer.api('POST', '/api/v1/negotiations', body);
    } catch (err) {
      return fail(`POST failed: ${String(err)}`);
    }
    const postMs = performance.now() - t0;
    if (res.status !== 201) return fail(`POST answered ${res.status}: ${JSON.stringify(res.body)}`);
    const consumerPid = String(res.body.consumer_pid);
    if (options.pollMs !== null) {
      for (;;) {
        const read = await consumer.api('GET', `/api/v1/negotiations/${encodeURIComponent(res.body.id)}`);
        if (read.body?.state === 'FINALIZED')
          return { ok: true, ms: performance.now() - t0, postMs, consumerPid, startedAt };
        if (read.body?.state === 'TERMINATED')
          return fail(`TERMINATED: ${read.body.error ?? ''}`, consumerPid, postMs);
        if (performance.now() > deadline)
          return fail(`not FINALIZED within ${options.timeoutMs} ms`, consumerPid, postMs);
        await new Promise((r) => setTimeout(r, options.pollMs!));
      }
    }
    const done = await completions.wait(consumerPid, deadline);
    if (!done) return fail(`not FINALIZED within ${options.timeoutMs} ms`, consumerPid, postMs);
    if (done.terminated) return fail(done.terminated, consumerPid, postMs);
    return {
      ok: true,
      ms: Math.max(done.consumer!, done.provider!) - t0,
      postMs,
      consumerPid,
      startedAt,
    };
  };
}

/**
 * Runs up to `total` operations with `clients` callers in parallel, starting no new one after
 * `seconds`; answers the outcomes and the wall time (until the last one in flight ended).
 */
async function drive<T>(total: number, seconds: number, clients: number, op: () => Promise<T>) {
  const results: T[] = [];
  let started = 0;
  const t0 = performance.now();
  const until = t0 + seconds * 1000;
  await Promise.all(
    Array.from({ length: Math.min(clients, total) }, async () => {
      while (started < total && performance.now() < until) {
        started++;
        results.push(await op());
      }
    }),
  );
  return { results, seconds: (performance.now() - t0) / 1000 };
}

// ---------------------------------------------------------------------------------------------
// The floor: update-with-start, three Updates, the result

async function floorRound(client: Client, taskQueue: string): Promise<number> {
  const t0 = performance.now();
  const start = new WithStartWorkflowOperation('floor', {
    workflowId: `floor-${randomUUID()}`,
    taskQueue,
    args: [],
    workflowIdConflictPolicy: 'FAIL',
  });
  await client.workflow.executeUpdateWithStart(floorStartUpdate, { startWorkflowOperation: start });
  const handle = await start.workflowHandle();
  for (let i = 0; i < FLOOR_STEPS; i++) await handle.executeUpdate(floorStepUpdate, { args: [i] });
  const steps = await handle.result();
  if (steps !== FLOOR_STEPS) throw new Error(`the floor workflow answered ${steps}`);
  return performance.now() - t0;
}

// ---------------------------------------------------------------------------------------------
// Where the time goes

const MILESTONES = [
  ['C', 'REQUESTED', 'ContractRequestMessage'],
  ['P', 'REQUESTED', 'ContractRequestMessage'],
  ['P', 'AGREED', 'ContractAgreementMessage'],
  ['C', 'AGREED', 'ContractAgreementMessage'],
  ['C', 'VERIFIED', 'ContractAgreementVerificationMessage'],
  ['P', 'VERIFIED', 'ContractAgreementVerificationMessage'],
  ['P', 'FINALIZED', 'ContractNegotiationEventMessage'],
  ['C', 'FINALIZED', 'ContractNegotiationEventMessage'],
] as const;

const PHASE_NAMES = [
  'POST → consumer REQUESTED (workflow started)',
  'consumer REQUESTED → provider REQUESTED (request delivered)',
  'provider REQUESTED → AGREED (agreement being sent)',
  'provider AGREED → consumer AGREED (agreement delivered)',
  'consumer AGREED → VERIFIED (verification being sent)',
  'consumer VERIFIED → provider VERIFIED (verification delivered)',
  'provider VERIFIED → FINALIZED (event being sent)',
  'provider FINALIZED → consumer FINALIZED (event delivered)',
  'consumer FINALIZED → both commits seen',
];

interface HistoryRow {
  consumer_pid: string;
  state: string;
  message_type: string | null;
  at: Date;
}

async function historyRows(databaseUrl: string, consumerPids: string[]): Promise<HistoryRow[]> {
  const client = new pg.Client({ connectionString: databaseUrl });
  await client.connect();
  try {
    const { rows } = await client.query<HistoryRow>(
      `SELECT n.consumer_pid, h.state, h.message_type, h.at
         FROM negotiation_history h JOIN negotiations n ON n.id = h.negotiation_id
        WHERE n.consumer_pid = ANY($1) ORDER BY h.version`,
      [consumerPids],
    );
    return rows;
  } finally {
    await client.end();
  }
}

/** Medians of the phases between the read-model history entries of both sides (workflow time). */
async function phaseBreakdown(outcomes: Outcome[], consumer: ConnectorProcess, provider: ConnectorProcess) {
  const ok = outcomes.filter((o) => o.ok && o.consumerPid);
  const pids = ok.map((o) => o.consumerPid!);
  const [c, p] = await Promise.all([
    historyRows(consumer.databaseUrl, pids),
    historyRows(provider.databaseUrl, pids),
  ]);
  const at = new Map<string, number>();
  for (const [side, rows] of [
    ['C', c],
    ['P', p],
  ] as const) {
    for (const r of rows) {
      const key = `${r.consumer_pid} ${side} ${r.state} ${r.message_type ?? ''}`;
      if (!at.has(key)) at.set(key, r.at.getTime());
    }
  }
  const phases: number[][] = PHASE_NAMES.map(() => []);
  for (const o of ok) {
    const times = [
      o.startedAt,
      ...MILESTONES.map(([side, state, type]) => at.get(`${o.consumerPid} ${side} ${state} ${type}`)),
      o.startedAt + o.ms,
    ];
    if (times.some((t) => t === undefined)) continue;
    for (let i = 0; i < PHASE_NAMES.length; i++) phases[i]!.push(times[i + 1]! - times[i]!);
  }
  return PHASE_NAMES.map((name, i) => ({ name, median: median(phases[i]!), p90: summarize(phases[i]!).p90 }));
}

interface Span {
  side: 'C' | 'P';
  what: string;
  scheduled: number;
  started: number | null;
  closed: number | null;
}

// eslint-disable-next-line @typescript-eslint/no-explicit-any -- history events are protobuf objects
const eventMs = (e: any): number =>
  Number(e.eventTime?.seconds ?? 0) * 1000 + (e.eventTime?.nanos ?? 0) / 1e6;

/** Workflow tasks and activities of one workflow, from its Temporal event history. */
async function spansOf(client: Client, workflowId: string, side: 'C' | 'P'): Promise<Span[]> {
  const history = await client.workflow.getHandle(workflowId).fetchHistory();
  const spans: Span[] = [];
  const byScheduled = new Map<string, Span>();
  let task: Span | null = null;
  for (const e of history.events ?? []) {
    const t = eventMs(e);
    const id = String(e.eventId);
    if (e.workflowTaskScheduledEventAttributes) {
      task = { side, what: 'workflow task', scheduled: t, started: null, closed: null };
      spans.push(task);
    } else if (e.workflowTaskStartedEventAttributes && task) task.started = t;
    else if (
      (e.workflowTaskCompletedEventAttributes ||
        e.workflowTaskFailedEventAttributes ||
        e.workflowTaskTimedOutEventAttributes) &&
      task
    ) {
      task.closed = t;
      task = null;
    } else if (e.activityTaskScheduledEventAttributes) {
      const s: Span = {
        side,
        what: e.activityTaskScheduledEventAttributes.activityType?.name ?? 'activity',
        scheduled: t,
        started: null,
        closed: null,
      };
      byScheduled.set(id, s);
      spans.push(s);
    } else if (e.activityTaskStartedEventAttributes) {
      const s = byScheduled.get(String(e.activityTaskStartedEventAttributes.scheduledEventId));
      if (s) s.started = t;
    } else {
      const closed =
        e.activityTaskCompletedEventAttributes ??
        e.activityTaskFailedEventAttributes ??
        e.activityTaskTimedOutEventAttributes;
      if (closed) {
        const s = byScheduled.get(String(closed.scheduledEventId));
        if (s) s.closed = t;
      } else if (e.workflowExecutionUpdateAcceptedEventAttributes) {
        const name = e.workflowExecutionUpdateAcceptedEventAttributes.acceptedRequest?.input?.name ?? '';
        spans.push({ side, what: `update accepted: ${name}`, scheduled: t, started: null, closed: null });
      } else if (e.workflowExecutionStartedEventAttributes) {
        spans.push({ side, what: 'workflow started', scheduled: t, started: null, closed: null });
      } else if (e.workflowExecutionCompletedEventAttributes) {
        spans.push({ side, what: 'workflow completed', scheduled: t, started: null, closed: null });
      }
    }
  }
  return spans;
}

async function workflowIdOf(databaseUrl: string, consumerPid: string): Promise<string> {
  const client = new pg.Client({ connectionString: databaseUrl });
  await client.connect();
  try {
    const { rows } = await client.query<{ workflow_id: string }>(
      'SELECT workflow_id FROM negotiations WHERE consumer_pid = $1',
      [consumerPid],
    );
    if (!rows[0]) throw new Error(`no negotiation with consumer_pid ${consumerPid}`);
    return rows[0].workflow_id;
  } finally {
    await client.end();
  }
}

const CATEGORIES = [
  'workflow task (poll answer → completion)',
  'activity writing the database',
  'Temporal task queue (scheduled → started)',
  'delivery activity (HTTP, peer API handler)',
  'outside workflows (client, API, commit seen)',
] as const;

/**
 * Attributes each instant of one negotiation (POST → done) to the first category that is busy
 * then, in the order of CATEGORIES; so the parts add up to the whole.
 */
function attribute(spans: Span[], start: number, end: number): number[] {
  const intervals: Array<[number, number, number]> = [];
  for (const s of spans) {
    if (s.started === null) continue;
    intervals.push([s.scheduled, s.started, 2]);
    if (s.closed === null) continue;
    const category = s.what === 'workflow task' ? 0 : s.what === 'deliverOutboxMessage' ? 3 : 1;
    intervals.push([s.started, s.closed, category]);
  }
  const cuts = [
    ...new Set([start, end, ...intervals.flatMap(([a, b]) => [a, b]).filter((t) => t > start && t < end)]),
  ].sort((a, b) => a - b);
  const out = CATEGORIES.map(() => 0);
  for (let i = 0; i + 1 < cuts.length; i++) {
    const [a, b] = [cuts[i]!, cuts[i + 1]!];
    const mid = (a + b) / 2;
    let best = CATEGORIES.length - 1;
    for (const [from, to, c] of intervals) if (from <= mid && mid < to && c < best) best = c;
    out[best]! += b - a;
  }
  return out;
}

interface TemporalBreakdown {
  sample: number;
  /** Mean ms per negotiation in each of CATEGORIES. */
  attribution: number[];
  perNegotiation: Array<{ side: string; what: string; count: number; queueMs: number; runMs: number }>;
  timeline: Array<Span & { offset: number }>;
  timelineTotalMs: number;
}

/**
 * Over a sample of negotiations: per side, how many workflow tasks and activities of each kind
 * a negotiation takes and their mean time in the queue (scheduled → started) and running
 * (started → closed); and the full timeline of the median one.
 */
async function temporalBreakdown(
  client: Client,
  outcomes: Outcome[],
  consumer: ConnectorProcess,
  provider: ConnectorProcess,
  sampleSize: number,
): Promise<TemporalBreakdown> {
  const ok = outcomes.filter((o) => o.ok && o.consumerPid).sort((a, b) => a.ms - b.ms);
  const mid = Math.floor(ok.length / 2);
  const sample = ok.slice(Math.max(0, mid - Math.floor(sampleSize / 2)), mid + Math.ceil(sampleSize / 2));
  const sums = new Map<string, { side: string; what: string; count: number; queue: number; run: number }>();
  let timeline: Array<Span & { offset: number }> = [];
  let timelineTotalMs = NaN;
  const attribution = CATEGORIES.map(() => 0);
  for (const o of sample) {
    const [cw, pw] = await Promise.all([
      workflowIdOf(consumer.databaseUrl, o.consumerPid!),
      workflowIdOf(provider.databaseUrl, o.consumerPid!),
    ]);
    const spans = [...(await spansOf(client, cw, 'C')), ...(await spansOf(client, pw, 'P'))];
    attribute(spans, o.startedAt, o.startedAt + o.ms).forEach(
      (v, i) => (attribution[i]! += v / sample.length),
    );
    for (const s of spans) {
      if (s.started === null || s.closed === null) continue;
      const key = `${s.side} ${s.what}`;
      const sum = sums.get(key) ?? { side: s.side, what: s.what, count: 0, queue: 0, run: 0 };
      sum.count++;
      sum.queue += s.started - s.scheduled;
      sum.run += s.closed - s.started;
      sums.set(key, sum);
    }
    if (o === ok[mid]) {
      timeline = spans
        .map((s) => ({ ...s, offset: s.scheduled - o.startedAt }))
        .sort((a, b) => a.scheduled - b.scheduled);
      timelineTotalMs = o.ms;
    }
  }
  const n = sample.length || 1;
  return {
    sample: sample.length,
    attribution,
    perNegotiation: [...sums.values()]
      .sort((a, b) => a.side.localeCompare(b.side) || b.run + b.queue - (a.run + a.queue))
      .map((s) => ({
        side: s.side,
        what: s.what,
        count: s.count / n,
        queueMs: s.queue / s.count,
        runMs: s.run / s.count,
      })),
    timeline,
    timelineTotalMs,
  };
}

// ---------------------------------------------------------------------------------------------
// The run

export async function run(args: string[] = []): Promise<void> {
  const options = parseOptions(args);
  if (options.connectors === 'dist') ensureBuilt(note);
  const started = Date.now();
  say(
    `negotiation bench: Node ${process.version}, ${os.availableParallelism()} cores, ` +
      `${options.warmup} warm-up, ${options.sequential} sequential, ${options.concurrent} with ` +
      `${options.clients} clients, floor ${options.floor}; completion seen by ` +
      (options.pollMs === null
        ? 'LISTEN/NOTIFY on commit'
        : `polling the consumer every ${options.pollMs} ms`),
  );

  const stops: Array<[string, () => Promise<unknown>]> = [];
  const remove = (dir: string) => () => Promise.resolve(fs.rmSync(dir, { recursive: true, force: true }));
  const workDir = fs.mkdtempSync(path.join(os.tmpdir(), 'bench-negotiation-'));
  stops.push(['work directory', remove(workDir)]);
  const pgDataDir = defaultTestDataDir();
  stops.push(['postgres data', remove(pgDataDir)]);
  let sampler: NodeJS.Timeout | undefined;

  try {
    // The stack: PostgreSQL, Temporal, the workflow bundles, the authority, the backend.
    const cli = await resolveTemporalCli({ explicit: process.env.TEMPORAL_CLI ?? null, say: note });
    const quiet = { trace() {}, debug() {}, info() {}, warn() {}, error: console.error, log() {} };
    const [postgres, temporal, connectorBundle, floorBundle] = await Promise.all([
      startEmbeddedPostgres({ dataDir: pgDataDir, ephemeral: true }),
      startTemporalDevServer({ cli, headless: true }),
      // Compiled connectors load the build's bundle; under tsx this process bundles once for both.
      options.connectors === 'dist' ? Promise.resolve(null) : bundleWorkflows(),
      bundleWorkflowCode({
        workflowsPath: FLOOR_WORKFLOWS,
        logger: quiet,
        webpackConfigHook: (config) => {
          config.resolve = { ...config.resolve, extensionAlias: { '.js': ['.ts', '.js'] } };
          return config;
        },
      }),
    ]);
    stops.push(['postgres', () => postgres.stop()]);
    stops.push(['temporal', () => temporal.stop()]);
    let bundlePath: string | null = null;
    if (connectorBundle && 'code' in connectorBundle) {
      bundlePath = path.join(workDir, 'workflow-bundle.js');
      fs.writeFileSync(bundlePath, connectorBundle.code);
    }
    const authority = await startAuthority();
    stops.push(['authority', () => authority.close()]);
    const backend = await startBuildingBackend({ keys: { k: '*' } });
    stops.push(['backend', () => backend.close()]);
    const postgresPid = childByComm('postgres');
    const temporalPid = childByComm('temporal');

    // The two connectors, each in its own process with its own database and task queue.
    const keyEncryptionKey = randomBytes(32).toString('base64');
    const connectors: ConnectorProcess[] = [];
    stops.push([
      'connectors',
      () => Promise.all(connectors.map((c) => stopChild(c.child, 'SIGTERM', 10_000))),
    ]);
    const t0 = Date.now();
    const [provider, consumer] = await Promise.all(
      (['provider', 'consumer'] as const).map(async (name) => {
        const database = `bench_${name}`;
        await ensureDatabase(postgres.adminUrl, database);
        const port = await freePort();
        const c = await startConnectorProcess(
          name,
          {
            PORT: String(port),
            PUBLIC_URL: `http://127.0.0.1:${port}`,
            TEMPORAL_ADDRESS: temporal.address,
            TEMPORAL_TASK_QUEUE: `bench-${name}`,
            DID_WEB_ALLOW_HTTP: 'true',
            AUTHORITY_URL: authority.url,
            KEY_ENCRYPTION_KEY: keyEncryptionKey,
            LOG_LEVEL: 'warn',
            DEMO_BACKEND: '0',
            DATA_DIR: path.join(workDir, name),
            ...(bundlePath ? { BENCH_WORKFLOW_BUNDLE: bundlePath } : {}),
          },
          postgres.urlFor(database),
          options.connectors,
        );
        connectors.push(c);
        return c;
      }),
    );
    const connectorsReadyS = (Date.now() - t0) / 1000;
    for (const c of [provider!, consumer!])
      authority.upsert({ did: c.did, name: c.name, roles: ['researcher'], active: true });
    sampler = setInterval(() => {
      for (const c of connectors) c.maxRssKb = Math.max(c.maxRssKb, procMemory(c.pid)?.rssKb ?? 0);
    }, 100);

    const completions = new Completions();
    stops.push(['listeners', () => completions.close()]);
    for (const c of [provider!, consumer!]) {
      await installNotifyTrigger(c.databaseUrl);
      await completions.listen(c.databaseUrl);
    }
    const offer = await publishOffer(provider!, backend.url, 'bench-offer');
    note(
      `stack ready in ${((Date.now() - started) / 1000).toFixed(1)} s (connectors ${connectorsReadyS.toFixed(1)} s); ` +
        `provider pid ${provider!.pid}, consumer pid ${consumer!.pid}`,
    );

    // The floor worker and a client, in this process.
    try {
      Runtime.install({ shutdownSignals: [], logger: new DefaultLogger('ERROR') });
    } catch {
      // already installed in this process (another bench ran before)
    }
    const nativeConnection = await NativeConnection.connect({ address: temporal.address });
    const floorWorker = await Worker.create({
      connection: nativeConnection,
      taskQueue: 'bench-floor',
      workflowBundle: floorBundle,
    });
    const floorRun = floorWorker.run();
    stops.push([
      'floor worker',
      async () => {
        if (floorWorker.getState() === 'RUNNING') floorWorker.shutdown();
        await floorRun;
        await nativeConnection.close();
      },
    ]);
    const connection = await Connection.connect({ address: temporal.address });
    stops.push(['temporal client', () => connection.close()]);
    const client = new Client({ connection });

    const components: Component[] = [
      { name: 'provider', pid: provider!.pid },
      { name: 'consumer', pid: consumer!.pid },
      { name: 'temporal', pid: temporalPid },
      { name: 'postgres', pid: postgresPid },
      { name: 'bench (clients)', pid: null },
    ].filter((c) => c.name.startsWith('bench') || c.pid !== null);

    // Floor.
    note('floor…');
    const floorOnce = () => floorRound(client, 'bench-floor');
    await drive(Math.min(20, options.floor), 5, 1, floorOnce);
    const floorSeq = await drive(options.floor, 10, 1, floorOnce);
    const cpuFloorBefore = cpuSnapshot(components);
    const floorConc = await drive(options.floor, 10, options.clients, floorOnce);
    const cpuFloorAfter = cpuSnapshot(components);

    // Negotiations.
    const negotiate = negotiator(consumer!, provider!, offer, completions, options);
    note(`negotiations: ${options.warmup} warm-up…`);
    const warm = await drive(options.warmup, 15, 1, negotiate);
    note(`negotiations: up to ${options.sequential} (${options.phaseSeconds} s) with 1 client…`);
    const seq = await drive(options.sequential, options.phaseSeconds, 1, negotiate);
    note(
      `negotiations: up to ${options.concurrent} (${options.phaseSeconds} s) with ${options.clients} clients…`,
    );
    const cpuBefore = cpuSnapshot(components);
    const conc = await drive(options.concurrent, options.phaseSeconds, options.clients, negotiate);
    const cpuAfter = cpuSnapshot(components);

    clearInterval(sampler);
    sampler = undefined;
    const proc = [procMemory(provider!.pid), procMemory(consumer!.pid)];
    const usage = [await provider!.memoryUsage(), await consumer!.memoryUsage()];
    const memory = [provider!, consumer!].map((c, i) => {
      const m = proc[i];
      const u = usage[i];
      return {
        heapTotalMb: u ? u.heapTotal / 2 ** 20 : NaN,
        heapUsedMb: u ? u.heapUsed / 2 ** 20 : NaN,
        liveHeapMb: u ? u.liveHeap / 2 ** 20 : NaN,
        externalMb: u ? u.external / 2 ** 20 : NaN,
        name: c.name,
        startHwmMb: mb(c.startHwmKb),
        peakHwmMb: mb(m?.hwmKb ?? 0),
        maxSampledRssMb: mb(Math.max(c.maxRssKb, m?.rssKb ?? 0)),
        endRssMb: mb(m?.rssKb ?? 0),
      };
    });

    // Cross-check with the read models: every successful one is FINALIZED on both sides.
    const okPids = [...warm.results, ...seq.results, ...conc.results]
      .filter((o) => o.ok)
      .map((o) => o.consumerPid!);
    const finalizedOn = async (c: ConnectorProcess) => {
      const db = new pg.Client({ connectionString: c.databaseUrl });
      await db.connect();
      try {
        const { rows } = await db.query<{ n: number }>(
          "SELECT count(*)::int AS n FROM negotiations WHERE state = 'FINALIZED' AND consumer_pid = ANY($1)",
          [okPids],
        );
        return rows[0]!.n;
      } finally {
        await db.end();
      }
    };
    const [providerFinalized, consumerFinalized] = await Promise.all([
      finalizedOn(provider!),
      finalizedOn(consumer!),
    ]);

    note('reading histories…');
    const phases = await phaseBreakdown(seq.results, consumer!, provider!);
    const phasesConc = await phaseBreakdown(conc.results, consumer!, provider!);
    const breakdown = await temporalBreakdown(client, seq.results, consumer!, provider!, 10);

    // ----- Report
    const okMs = (r: Outcome[]) => r.filter((o) => o.ok).map((o) => o.ms);
    const failures = (r: Outcome[]) => r.filter((o) => !o.ok);
    const sSeq = summarize(okMs(seq.results));
    const sConc = summarize(okMs(conc.results));
    const sFloorSeq = summarize(floorSeq.results);
    const sFloorConc = summarize(floorConc.results);
    const postSeq = summarize(seq.results.filter((o) => o.ok).map((o) => o.postMs));
    const postConc = summarize(conc.results.filter((o) => o.ok).map((o) => o.postMs));
    const perSecond = conc.results.filter((o) => o.ok).length / conc.seconds;
    const floorPerSecond = floorConc.results.length / floorConc.seconds;
    const failSeq = failures(seq.results);
    const failConc = failures(conc.results);
    const failWarm = failures(warm.results);

    say();
    say(
      `latency, ms (negotiation: POST /api/v1/negotiations → ${options.pollMs === null ? 'FINALIZED committed on both sides' : "the consumer's GET answers FINALIZED"})`,
    );
    const row = (name: string, s: Summary, fail: number | string) => [
      name,
      s.n,
      ms(s.p50),
      ms(s.p90),
      ms(s.p99),
      ms(s.mean),
      ms(s.max),
      fail,
    ];
    table(
      ['', 'n', 'p50', 'p90', 'p99', 'mean', 'max', 'failed'],
      [
        row('floor, 1 client', sFloorSeq, 0),
        row(`floor, ${options.clients} clients`, sFloorConc, 0),
        row('negotiation, 1 client', sSeq, failSeq.length),
        row(`negotiation, ${options.clients} clients`, sConc, failConc.length),
        row('  of which POST → 201, 1 client', postSeq, ''),
        row(`  of which POST → 201, ${options.clients} clients`, postConc, ''),
      ],
    );
    say(
      `  negotiation p50 / floor p50: ${(sSeq.p50 / sFloorSeq.p50).toFixed(1)}× (1 client), ` +
        `${(sConc.p50 / sFloorConc.p50).toFixed(1)}× (${options.clients} clients)`,
    );
    if (failWarm.length) say(`  warm-up failures: ${failWarm.length}`);
    say();
    say(
      `throughput with ${options.clients} clients: ${perSecond.toFixed(1)} negotiations/s ` +
        `(${conc.results.length} in ${conc.seconds.toFixed(1)} s); floor ${floorPerSecond.toFixed(1)} rounds/s`,
    );
    say(
      `read models: ${consumerFinalized}/${okPids.length} FINALIZED at the consumer, ` +
        `${providerFinalized}/${okPids.length} at the provider`,
    );
    for (const f of [...failWarm, ...failSeq, ...failConc].slice(0, 5))
      say(`  failure: ${f.consumerPid ?? '(no pid)'}: ${f.error ?? ''}`);

    say();
    say('memory per connector process, MB (VmHWM = peak resident set)');
    table(
      [
        '',
        'peak after start',
        'peak (VmHWM) at end',
        'RSS at end',
        'of which main JS heap',
        'heap used',
        'live after full GC',
        'external',
      ],
      memory.map((m) => [
        m.name,
        ms(m.startHwmMb, 0),
        ms(m.peakHwmMb, 0),
        ms(m.endRssMb, 0),
        ms(m.heapTotalMb, 0),
        ms(m.heapUsedMb, 0),
        ms(m.liveHeapMb, 0),
        ms(m.externalMb, 0),
      ]),
    );
    say("  (the rest of the RSS: code, the workflow thread's V8 isolate, the Temporal core (Rust), buffers)");
    say(`  (${describeConnectors(options.connectors)})`);

    say();
    say(
      `CPU during the ${options.clients}-client run (2 cores = ${(2 * conc.seconds).toFixed(1)} s available)`,
    );
    const cpuRows = components.map((c) => {
      const used = (cpuAfter[c.name]! - cpuBefore[c.name]!) / 1000;
      return [
        c.name,
        used.toFixed(1),
        `${((100 * used) / conc.seconds).toFixed(0)} %`,
        ms((used * 1000) / conc.results.length, 1),
      ];
    });
    table(['', 'CPU s', 'of one core', 'ms per negotiation'], cpuRows);
    const floorTemporalMs =
      ((cpuFloorAfter.temporal ?? NaN) - (cpuFloorBefore.temporal ?? NaN)) /
      Math.max(1, floorConc.results.length);
    say(
      `  floor with ${options.clients} clients: the Temporal server used ${ms(floorTemporalMs, 1)} ms of CPU ` +
        `per round (one workflow: update-with-start, ${FLOOR_STEPS} Updates, its result), so on ` +
        `${os.availableParallelism()} cores it alone allows at most ` +
        `${((1000 * os.availableParallelism()) / floorTemporalMs).toFixed(0)} such rounds/s`,
    );

    say();
    say('targets (issue 4 §7)');
    const mark = (ok: boolean) => (ok ? 'pass' : 'FAIL');
    const maxHwm = Math.max(...memory.map((m) => m.peakHwmMb));
    const targets = [
      ['p50 ≤ 100 ms, 1 client', ms(sSeq.p50), mark(sSeq.p50 <= TARGETS.p50Ms)],
      [`p50 ≤ 100 ms, ${options.clients} clients`, ms(sConc.p50), mark(sConc.p50 <= TARGETS.p50Ms)],
      ['p90 ≤ 150 ms, 1 client', ms(sSeq.p90), mark(sSeq.p90 <= TARGETS.p90Ms)],
      [`p90 ≤ 150 ms, ${options.clients} clients`, ms(sConc.p90), mark(sConc.p90 <= TARGETS.p90Ms)],
      [`no failures, ${options.clients} clients`, failConc.length, mark(failConc.length === 0)],
      ['≥ 25 negotiations/s', perSecond.toFixed(1), mark(perSecond >= TARGETS.perSecond)],
      ['≤ 250 MB RSS per connector (peak)', ms(maxHwm, 0), mark(maxHwm <= TARGETS.rssMb)],
    ];
    table(['target', 'measured', ''], targets);

    say();
    say('phases, ms (read-model history of both sides: workflow time of each state change)');
    table(
      ['', 'median, 1 client', 'p90', `median, ${options.clients} clients`, 'p90'],
      phases.map((p, i) => [
        p.name,
        ms(p.median),
        ms(p.p90),
        ms(phasesConc[i]!.median),
        ms(phasesConc[i]!.p90),
      ]),
    );

    say();
    say(
      `Temporal, per negotiation (event histories of the ${breakdown.sample} median sequential negotiations; ` +
        'C = consumer, P = provider; queue = scheduled → started, run = started → closed)',
    );
    table(
      ['side', 'what', 'count', 'queue ms', 'run ms'],
      breakdown.perNegotiation.map((s) => [s.side, s.what, s.count.toFixed(1), ms(s.queueMs), ms(s.runMs)]),
      2,
    );
    say();
    say('where the time of a negotiation goes (same sample; each instant counted once, first busy category)');
    table(
      ['', 'ms', 'share'],
      CATEGORIES.map((c, i) => [
        c,
        ms(breakdown.attribution[i]!),
        `${((100 * breakdown.attribution[i]!) / (breakdown.attribution.reduce((a, b) => a + b, 0) || 1)).toFixed(0)} %`,
      ]),
    );
    say();
    say(
      `timeline of the median sequential negotiation (${ms(breakdown.timelineTotalMs)} ms), ms from the POST`,
    );
    table(
      ['at', 'side', 'what', 'queue', 'run'],
      breakdown.timeline.map((s) => [
        ms(s.offset),
        s.side,
        s.what,
        s.started === null ? '' : ms(s.started - s.scheduled),
        s.started === null || s.closed === null ? '' : ms(s.closed - s.started),
      ]),
      0,
    );

    const result = {
      bench: 'negotiation',
      node: process.version,
      cores: os.availableParallelism(),
      completion: options.pollMs === null ? 'notify' : `poll ${options.pollMs} ms`,
      floor: {
        sequential: sFloorSeq,
        concurrent: sFloorConc,
        perSecond: floorPerSecond,
        temporalCpuMsPerRound: floorTemporalMs,
      },
      negotiation: {
        sequential: { ...sSeq, failed: failSeq.length, post: postSeq },
        concurrent: {
          ...sConc,
          clients: options.clients,
          failed: failConc.length,
          perSecond,
          seconds: conc.seconds,
          post: postConc,
        },
        warmupFailed: failWarm.length,
      },
      ratioP50: sSeq.p50 / sFloorSeq.p50,
      memoryMb: memory,
      cpuMsPerNegotiation: Object.fromEntries(
        components.map((c) => [c.name, (cpuAfter[c.name]! - cpuBefore[c.name]!) / conc.results.length]),
      ),
      phases: phases.map((p, i) => ({ ...p, concurrentMedian: phasesConc[i]!.median })),
      temporal: breakdown.perNegotiation,
      attribution: Object.fromEntries(CATEGORIES.map((c, i) => [c, breakdown.attribution[i]])),
      targets: Object.fromEntries(targets.map(([name, value, m]) => [name, { value, pass: m === 'pass' }])),
      seconds: (Date.now() - started) / 1000,
    };
    say();
    say(JSON.stringify(result));
  } finally {
    if (sampler) clearInterval(sampler);
    for (const [name, stop] of stops.reverse()) {
      await stop().catch((err: unknown) => note(`while stopping ${name}: ${String(err)}`));
    }
  }
}

if (import.meta.url === pathToFileURL(path.resolve(process.argv[1] ?? '')).href) {
  await run(process.argv.slice(2));
}
