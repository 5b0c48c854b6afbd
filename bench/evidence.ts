/**
 * Evidence log throughput: appends per second (one caller, 8 and 32 concurrent callers in one
 * process, 8 writers in separate pools as separate processes would be) and verified entries per second,
 * each next to a baseline measured in the same run on the same server:
 *   - appends: a plain INSERT of the same row into an unchained table, at the same concurrency;
 *   - verify: the same keyset SELECT of the same rows, with no hashing or checks; with the CPU
 *     time per entry of this process and of the PostgreSQL server (from /proc), steadier than
 *     rates when other work shares the machine.
 * Also the textbook alternative (a head row locked with SELECT … FOR UPDATE per append), which
 * is why db/evidence.ts does not use it.
 *
 * Run: `npx tsx bench/evidence.ts [--seconds=3] [--entries=200000] [--no-durable]`, or
 * `npm run bench -- evidence`. The first part runs on an ephemeral server (fsync off, as the tests
 * use); the durable part on a server with fsync and synchronous_commit on (production settings).
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { randomUUID } from 'node:crypto';
import { pathToFileURL } from 'node:url';
import { defaultTestDataDir, startEmbeddedPostgres, type EmbeddedPostgresHandle } from '../dev/postgres.js';
import { createDb, ensureDatabase, migrateLatest, type Db } from '../db/knex.js';
import {
  GENESIS_HASH,
  VERIFY_PAGE_SIZE,
  envelopeHead,
  envelopeTail,
  evidenceStore,
  sha256Hex,
} from '../db/evidence.js';

interface Options {
  seconds: number;
  entries: number;
  durable: boolean;
}

function parseOptions(args: string[]): Options {
  const value = (name: string) => args.find((a) => a.startsWith(`--${name}=`))?.split('=')[1];
  return {
    seconds: Number(value('seconds') ?? 3),
    entries: Number(value('entries') ?? 200_000),
    durable: !args.includes('--no-durable'),
  };
}

/** A DSP-sized message (~400 bytes canonical), different per call. */
function samplePayload(i: number) {
  return {
    '@context': ['https://w3id.org/dspace/2025/1/context.jsonld'],
    '@type': 'ContractRequestMessage',
    consumerPid: `urn:uuid:${randomUUID()}`,
    callbackAddress: 'https://consumer.example/dsp/callback',
    offer: {
      '@id': `urn:offer:${i}`,
      target: 'urn:dataset:building-0363010000123456',
      permission: [{ action: 'use', constraint: [{ leftOperand: 'pl:membership', operator: 'eq' }] }],
    },
  };
}

const sampleEntry = (i: number) => ({
  kind: 'dsp.inbound',
  process_id: `neg-${i % 1000}`,
  payload: samplePayload(i),
});

/** Runs `workers` loops calling `op` until `seconds` pass; answers operations per second. */
async function rate(workers: number, seconds: number, op: (i: number) => Promise<unknown>): Promise<number> {
  let done = 0;
  const until = performance.now() + seconds * 1000;
  const started = performance.now();
  await Promise.all(
    Array.from({ length: workers }, async () => {
      while (performance.now() < until) await op(done++);
    }),
  );
  return done / ((performance.now() - started) / 1000);
}

async function createBaselineTables(db: Db) {
  await db.raw(`
    CREATE TABLE IF NOT EXISTS plain_log (
      seq bigserial PRIMARY KEY, id text NOT NULL UNIQUE, kind text NOT NULL, process_id text,
      at timestamptz NOT NULL, canonical bytea NOT NULL);
    CREATE INDEX IF NOT EXISTS plain_log_process_id ON plain_log (process_id, seq);
    CREATE TABLE IF NOT EXISTS locked_log (LIKE evidence INCLUDING ALL);
    CREATE TABLE IF NOT EXISTS locked_head (one boolean PRIMARY KEY CHECK (one), seq bigint, hash text);
    INSERT INTO locked_head VALUES (true, 0, '${GENESIS_HASH}') ON CONFLICT DO NOTHING;`);
}

/** Baseline: the same row, serialized with JSON.stringify, in one autocommit INSERT. */
async function plainInsert(db: Db, i: number) {
  const e = sampleEntry(i);
  await db.raw('INSERT INTO plain_log (id, kind, process_id, at, canonical) VALUES (?, ?, ?, ?, ?)', [
    `ev_${randomUUID()}`,
    e.kind,
    e.process_id,
    new Date().toISOString(),
    Buffer.from(JSON.stringify(e.payload)),
  ]);
}

/** The alternative: BEGIN; lock the head row; insert; move the head; COMMIT (4 round trips under the lock). */
async function lockedAppend(db: Db, i: number) {
  const e = sampleEntry(i);
  await db.transaction(async (trx) => {
    const { rows } = await trx.raw<{ rows: Array<{ seq: number; hash: string }> }>(
      'SELECT seq, hash FROM locked_head FOR UPDATE',
    );
    const head = rows[0]!;
    const id = `ev_${randomUUID()}`;
    const at = new Date().toISOString();
    const seq = head.seq + 1;
    const canonical = Buffer.from(
      envelopeHead({ at, id, kind: e.kind }) +
        JSON.stringify(e.payload) +
        envelopeTail({ prev_hash: head.hash, process_id: e.process_id, seq }),
    );
    const hash = sha256Hex(canonical);
    await trx.raw(
      `INSERT INTO locked_log (seq, id, kind, process_id, at, prev_hash, hash, canonical) VALUES (?, ?, ?, ?, ?, ?, ?, ?)`,
      [seq, id, e.kind, e.process_id, at, head.hash, hash, canonical],
    );
    await trx.raw('UPDATE locked_head SET seq = ?, hash = ?', [seq, hash]);
  });
}

interface Row {
  name: string;
  value: number;
  baseline: number;
  unit: string;
}

function print(title: string, rows: Row[]) {
  console.log(`\n${title}`);
  console.log(`  ${'measure'.padEnd(58)} ${'rate'.padStart(10)} ${'baseline'.padStart(10)}  ratio`);
  for (const r of rows) {
    const fmt = (n: number) => Math.round(n).toLocaleString('en-US').padStart(10);
    console.log(
      `  ${r.name.padEnd(58)} ${fmt(r.value)} ${fmt(r.baseline)}  ${(r.value / r.baseline).toFixed(2)}  ${r.unit}`,
    );
  }
}

async function appendRates(url: string, seconds: number): Promise<Row[]> {
  const db = createDb(url, { poolMax: 10 });
  const separate = Array.from({ length: 8 }, () => createDb(url, { poolMax: 2 }));
  try {
    await migrateLatest(db);
    await createBaselineTables(db);
    const store = evidenceStore(db);
    const append = (i: number) => store.append(sampleEntry(i));
    const plain = (i: number) => plainInsert(db, i);
    const rows: Row[] = [];
    const measure = async (name: string, workers: number, op: (i: number) => Promise<unknown>) => {
      const value = await rate(workers, seconds, op);
      const baseline = await rate(workers, seconds, plain);
      rows.push({ name, value, baseline, unit: 'appends/s' });
    };
    await rate(1, 0.5, append); // warm up connections and the plan cache
    await measure('chain, 1 caller', 1, append);
    await measure('chain, 8 concurrent callers, one process', 8, append);
    // A connector's worker runs up to 100 activities at once, each appending: the writer batches
    // whatever arrives while a statement is in flight.
    await measure('chain, 32 concurrent callers, one process', 32, append);
    let next = 0;
    await measure('chain, 8 writers with their own pools (as 8 processes)', 8, (i) =>
      evidenceStore(separate[next++ % 8]!).append(sampleEntry(i)),
    );
    await measure('alternative: head row FOR UPDATE, 1 caller', 1, (i) => lockedAppend(db, i));
    await measure('alternative: head row FOR UPDATE, 8 concurrent', 8, (i) => lockedAppend(db, i));
    const check = await store.verify();
    if (!check.ok) throw new Error(`the chain broke under the benchmark at ${check.first_broken_seq}`);
    return rows;
  } finally {
    await Promise.all([db.destroy(), ...separate.map((d) => d.destroy())]);
  }
}

/** Plain keyset SELECT of the same rows and columns verify() reads, doing nothing with them. */
async function streamOnly(db: Db): Promise<number> {
  let after = 0;
  let count = 0;
  for (;;) {
    const { rows } = await db.raw<{ rows: Array<{ seq: number }> }>(
      'SELECT seq, id, kind, process_id, at, prev_hash, hash, canonical FROM evidence WHERE seq > ? ORDER BY seq LIMIT ?',
      [after, VERIFY_PAGE_SIZE],
    );
    if (!rows.length) return count;
    count += rows.length;
    after = rows.at(-1)!.seq;
  }
}

/** CPU time (µs) used so far by the PostgreSQL server: its postmaster and every backend (Linux /proc). */
function serverCpuMicros(clusterDir: string): number {
  const postmaster = Number(fs.readFileSync(path.join(clusterDir, 'postmaster.pid'), 'utf8').split('\n')[0]);
  const ticksPerSecond = 100; // USER_HZ
  let ticks = 0;
  for (const pid of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(pid)) continue;
    let stat: string;
    try {
      stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
    } catch {
      continue; // gone meanwhile
    }
    // fields after "(comm)": state ppid … utime (14th) stime (15th)
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    if (Number(pid) === postmaster || Number(fields[1]) === postmaster)
      ticks += Number(fields[11]) + Number(fields[12]);
  }
  return (ticks / ticksPerSecond) * 1e6;
}

/** Runs `op` (which handles `count()` entries) and answers its rate and CPU µs per entry here and in the server. */
async function measured(clusterDir: string, op: () => Promise<number>) {
  const cpu = process.cpuUsage();
  const server = serverCpuMicros(clusterDir);
  const started = performance.now();
  const entries = await op();
  const seconds = (performance.now() - started) / 1000;
  const used = process.cpuUsage(cpu);
  return {
    entries,
    rate: entries / seconds,
    clientCpu: (used.user + used.system) / entries,
    serverCpu: (serverCpuMicros(clusterDir) - server) / entries,
  };
}

async function verifyRate(
  url: string,
  clusterDir: string,
  entries: number,
): Promise<{ rows: Row[]; note: string }> {
  const db = createDb(url, { poolMax: 10 });
  try {
    await migrateLatest(db);
    const store = evidenceStore(db);
    const have = (await store.verify()).entries;
    const fill = Math.max(0, entries - have);
    let i = 0;
    // Many callers in one process: the writer batches them, so filling is quick.
    await Promise.all(
      Array.from({ length: 64 }, async () => {
        while (i < fill) await store.append(sampleEntry(i++));
      }),
    );
    await db.raw('VACUUM ANALYZE evidence');
    await streamOnly(db); // warm the cache for both
    const verify = await measured(clusterDir, async () => {
      const result = await store.verify();
      if (!result.ok) throw new Error(`chain broken at ${result.first_broken_seq}`);
      return result.entries;
    });
    const stream = await measured(clusterDir, () => streamOnly(db));
    const heap = process.memoryUsage().heapUsed / 2 ** 20;
    const cpu = (m: { clientCpu: number; serverCpu: number }) =>
      `${m.clientCpu.toFixed(2)} µs here + ${m.serverCpu.toFixed(2)} µs in PostgreSQL`;
    return {
      rows: [
        {
          name: `verify ${verify.entries.toLocaleString('en-US')} entries (heap after: ${heap.toFixed(0)} MiB)`,
          value: verify.rate,
          baseline: stream.rate,
          unit: 'entries/s',
        },
      ],
      note: `  CPU per entry: verify ${cpu(verify)}; plain stream ${cpu(stream)}`,
    };
  } finally {
    await db.destroy();
  }
}

async function onServer<T>(
  options: { durable: boolean },
  run: (url: string, server: EmbeddedPostgresHandle) => Promise<T>,
): Promise<T> {
  const dataDir = defaultTestDataDir();
  let server: EmbeddedPostgresHandle | undefined;
  try {
    server = await startEmbeddedPostgres({ dataDir, ephemeral: !options.durable });
    await ensureDatabase(server.adminUrl, 'bench');
    return await run(server.urlFor('bench'), server);
  } finally {
    await server?.stop();
    fs.rmSync(dataDir, { recursive: true, force: true });
  }
}

export async function run(args: string[] = []): Promise<void> {
  const options = parseOptions(args);
  console.log(
    `evidence bench: Node ${process.version}, ${os.availableParallelism()} cores, ${options.seconds} s per rate, load average ${os.loadavg()[0]!.toFixed(2)}`,
  );
  await onServer({ durable: false }, async (url, server) => {
    const appends = await appendRates(url, options.seconds);
    const verify = await verifyRate(url, server.clusterDir, options.entries);
    print('ephemeral server (fsync off, synchronous_commit off)', [...appends, ...verify.rows]);
    console.log(verify.note);
  });
  if (options.durable) {
    await onServer({ durable: true }, async (url) => {
      print('durable server (fsync on, synchronous_commit on)', await appendRates(url, options.seconds));
    });
  }
}

if (import.meta.url === pathToFileURL(path.resolve(process.argv[1] ?? '')).href) {
  await run(process.argv.slice(2));
}
