/**
 * The load generator of bench/gateway.ts, in its own process so that it neither shares an event
 * loop with the bench's bookkeeping nor hides its CPU among the connectors'. Started with
 * `fork` (IPC); each { run: LoadJob } message is answered with { result: LoadResult } or
 * { error }. Exits when the parent goes.
 *
 * A closed loop: `connections` callers on one undici Pool of as many connections, each sending
 * the next request as soon as its answer is read to the end. Warm-up first (same pool, not
 * counted), then the measured run; no caller starts a request after the deadline.
 */
import { Pool } from 'undici';

export interface LoadJob {
  origin: string;
  /** Path and query. */
  path: string;
  headers: Record<string, string>;
  connections: number;
  warmupSeconds: number;
  seconds: number;
}

export interface LoadResult {
  /** Answers 200 and read to the end, in the measured run. */
  ok: number;
  failed: number;
  /** The first failure: status and the start of its body, or the error. */
  firstFailure: string | null;
  /** From the start of the measured run until its last answer was read. */
  seconds: number;
  perSecond: number;
  /** Mean size of the 200 answers. */
  answerBytes: number;
  /** Latency of the 200 answers (request sent → last byte read), ms. */
  p50: number;
  p90: number;
  p99: number;
  mean: number;
  max: number;
  /** CPU this process used in the measured run, ms. */
  cpuMs: number;
  /** The warm-up before it (same pool): answers 200 and its length. */
  warmup: { ok: number; seconds: number };
}

/** Nearest-rank quantile of sorted values. */
function quantile(sorted: Float64Array, q: number): number {
  if (sorted.length === 0) return NaN;
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1))]!;
}

async function drive(pool: Pool, job: LoadJob, seconds: number) {
  const latencies: number[] = [];
  let failed = 0;
  let bytes = 0;
  let firstFailure: string | null = null;
  const started = performance.now();
  const until = started + seconds * 1000;
  const caller = async () => {
    while (performance.now() < until) {
      const t0 = performance.now();
      try {
        const res = await pool.request({ method: 'GET', path: job.path, headers: job.headers });
        if (res.statusCode !== 200) {
          const text = await res.body.text();
          failed++;
          firstFailure ??= `${res.statusCode}: ${text.slice(0, 300)}`;
          continue;
        }
        let size = 0;
        for await (const chunk of res.body) size += (chunk as Buffer).length;
        latencies.push(performance.now() - t0);
        bytes += size;
      } catch (err) {
        failed++;
        firstFailure ??= String(err);
      }
    }
  };
  await Promise.all(Array.from({ length: job.connections }, caller));
  return { latencies, failed, bytes, firstFailure, seconds: (performance.now() - started) / 1000 };
}

async function run(job: LoadJob): Promise<LoadResult> {
  const pool = new Pool(job.origin, {
    connections: job.connections,
    pipelining: 1,
    keepAliveTimeout: 30_000,
    headersTimeout: 60_000,
    bodyTimeout: 60_000,
  });
  try {
    const warm =
      job.warmupSeconds > 0 ? await drive(pool, job, job.warmupSeconds) : { latencies: [], seconds: 0 };
    const cpu0 = process.cpuUsage();
    const r = await drive(pool, job, job.seconds);
    const cpu = process.cpuUsage(cpu0);
    const sorted = Float64Array.from(r.latencies).sort();
    const ok = sorted.length;
    return {
      ok,
      failed: r.failed,
      firstFailure: r.firstFailure,
      seconds: r.seconds,
      perSecond: ok / r.seconds,
      answerBytes: ok ? r.bytes / ok : NaN,
      p50: quantile(sorted, 0.5),
      p90: quantile(sorted, 0.9),
      p99: quantile(sorted, 0.99),
      mean: ok ? sorted.reduce((s, v) => s + v, 0) / ok : NaN,
      max: ok ? sorted[ok - 1]! : NaN,
      cpuMs: (cpu.user + cpu.system) / 1000,
      warmup: { ok: warm.latencies.length, seconds: warm.seconds },
    };
  } finally {
    await pool.close();
  }
}

if (process.send) {
  process.on('message', (message: { run?: LoadJob }) => {
    if (!message.run) return;
    run(message.run).then(
      (result) => process.send!({ result }),
      (err: unknown) => process.send!({ error: String(err) }),
    );
  });
  process.on('disconnect', () => process.exit(0));
  process.send({ ready: true });
}
