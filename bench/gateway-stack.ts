/**
 * Processes of bench/gateway.ts: the backend (bench/gateway-backend.ts), the load generator
 * (bench/gateway-load.ts) and the two hops of the floor (bench/gateway-floor-proxy.ts) as children (connectors: bench/connectors.ts), and their memory and CPU
 * read from /proc.
 */
import fs from 'node:fs';
import path from 'node:path';
import { fork, spawnSync, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { PROJECT_ROOT } from '../config.js';
import type { LoadJob, LoadResult } from './gateway-load.js';

const here = path.dirname(fileURLToPath(import.meta.url));
const note = (line: string) => process.stderr.write(`[bench] ${line}\n`);

// ---------------------------------------------------------------------------------------------
// /proc

const CLK_TCK = Number(spawnSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).stdout.trim()) || 100;

/** Resident set now and its peak (VmHWM) in kB; null when the process is gone. */
export function procMemory(pid: number): { rssKb: number; hwmKb: number } | null {
  try {
    const status = fs.readFileSync(`/proc/${pid}/status`, 'utf8');
    const field = (name: string) => Number(new RegExp(`^${name}:\\s+(\\d+) kB`, 'm').exec(status)?.[1] ?? 0);
    return { rssKb: field('VmRSS'), hwmKb: field('VmHWM') };
  } catch {
    return null;
  }
}

/**
 * Resets a process's VmHWM to its current RSS (Linux ≥ 4.0: `5` to /proc/pid/clear_refs), so
 * that the peak of one bench case can be read on its own. False when the kernel refuses.
 */
export function resetPeakRss(pid: number): boolean {
  try {
    fs.writeFileSync(`/proc/${pid}/clear_refs`, '5');
    return true;
  } catch {
    return false;
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
    const f = text
      .slice(close + 2)
      .split(' ')
      .map((x) => Number(x));
    // After the comm: state(0) ppid(1) … utime(11) stime(12) cutime(13) cstime(14).
    return {
      pid,
      ppid: f[1]!,
      comm: text.slice(text.indexOf('(') + 1, close),
      ticks: f[11]! + f[12]! + f[13]! + f[14]!,
    };
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

/** CPU milliseconds used so far by each root process and its descendants. */
export function treeCpuMs(roots: Record<string, number>): Record<string, number> {
  const procs = allProcs();
  const children = new Map<number, ProcStat[]>();
  for (const p of procs) children.set(p.ppid, [...(children.get(p.ppid) ?? []), p]);
  const out: Record<string, number> = {};
  for (const [name, root] of Object.entries(roots)) {
    let ticks = procs.find((p) => p.pid === root)?.ticks ?? 0;
    const queue = [root];
    while (queue.length) {
      for (const c of children.get(queue.shift()!) ?? []) {
        ticks += c.ticks;
        queue.push(c.pid);
      }
    }
    out[name] = (ticks * 1000) / CLK_TCK;
  }
  return out;
}

/** Our direct child by command name (the Temporal CLI, the postmaster). */
export function childByComm(comm: string): number | null {
  return allProcs().find((p) => p.ppid === process.pid && p.comm === comm)?.pid ?? null;
}

/** Forks a TypeScript helper of this folder under tsx and waits for its first message. */
async function forkHelper<T>(
  script: string,
  env: Record<string, string>,
): Promise<{ child: ChildProcess; first: T }> {
  const child = fork(path.join(here, script), [], {
    cwd: PROJECT_ROOT,
    execArgv: ['--import', 'tsx'],
    env: { ...process.env, ...env },
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
  const first = await new Promise<T>((resolve, reject) => {
    child.once('message', (m) => resolve(m as T));
    child.once('exit', (code) => reject(new Error(`${script} exited (${code}) before it was ready`)));
  });
  return { child, first };
}

export interface BackendProcess {
  child: ChildProcess;
  pid: number;
  /** Base URL per latency in ms. */
  urls: Record<string, string>;
}

export async function startBackendProcess(
  buildingsFile: string,
  key: string,
  latencies: number[],
): Promise<BackendProcess> {
  const { child, first } = await forkHelper<{ urls: Record<string, string> }>('gateway-backend.ts', {
    BENCH_BUILDINGS_FILE: buildingsFile,
    BENCH_BACKEND_KEY: key,
    BENCH_LATENCIES: latencies.join(','),
  });
  return { child, pid: child.pid!, urls: first.urls };
}

export interface ProxyHop {
  child: ChildProcess;
  pid: number;
  url: string;
}

/**
 * One bare proxy hop of the floor (bench/gateway-floor-proxy.ts). Each route is [path prefix,
 * upstream origin, upstream prefix].
 */
export async function startProxyHop(
  routes: Array<[string, string, string]>,
  headers: Record<string, string>,
  connections: number,
): Promise<ProxyHop> {
  const { child, first } = await forkHelper<{ url: string }>('gateway-floor-proxy.ts', {
    BENCH_PROXY_ROUTES: JSON.stringify(routes),
    BENCH_PROXY_HEADERS: JSON.stringify(headers),
    BENCH_PROXY_CONNECTIONS: String(connections),
  });
  return { child, pid: child.pid!, url: first.url };
}

export interface LoadProcess {
  child: ChildProcess;
  pid: number;
  run(job: LoadJob): Promise<LoadResult>;
}

export async function startLoadProcess(): Promise<LoadProcess> {
  const { child } = await forkHelper<{ ready: true }>('gateway-load.ts', {});
  return {
    child,
    pid: child.pid!,
    run: (job) =>
      new Promise((resolve, reject) => {
        const onExit = (code: number | null) => reject(new Error(`the load generator exited (${code})`));
        child.once('exit', onExit);
        child.once('message', (m: { result?: LoadResult; error?: string }) => {
          child.off('exit', onExit);
          if (m.result) resolve(m.result);
          else reject(new Error(`the load generator failed: ${m.error ?? 'no answer'}`));
        });
        child.send({ run: job });
      }),
  };
}

/** Stops a forked helper: closing the IPC channel makes it exit; SIGKILL after `graceMs`. */
export function stopHelper(child: ChildProcess, graceMs = 5_000): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve();
  return new Promise((resolve) => {
    const timer = setTimeout(() => child.kill('SIGKILL'), graceMs);
    child.once('exit', () => {
      clearTimeout(timer);
      resolve();
    });
    if (child.connected) child.disconnect();
    else child.kill('SIGTERM');
  });
}

export { note };
