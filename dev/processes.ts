/**
 * Child processes of the embedded stack. Each child is started through `setpriv --pdeathsig`
 * where available, so the kernel stops it when our process dies, even by SIGKILL: no orphans.
 */
import { spawn, spawnSync, type ChildProcess, type SpawnOptions } from 'node:child_process';
import net from 'node:net';
import fs from 'node:fs';

const setpriv = ['/usr/bin/setpriv', '/bin/setpriv'].find((p) => fs.existsSync(p));
const setprivHasDeathSignal = setpriv
  ? spawnSync(setpriv, ['--help'], { encoding: 'utf8' }).stdout.includes('pdeathsig')
  : false;

let warned = false;
function warnOnceWithoutDeathSignal() {
  if (warned) return;
  warned = true;
  process.stderr.write(
    'note: setpriv (util-linux) with --pdeathsig is not available here, so if this process is killed ' +
      'abruptly its PostgreSQL and Temporal children keep running; stop it with Ctrl-C.\n',
  );
}

/**
 * Spawns `command` so that it dies with us. `signal` is what the child gets when we die
 * (PostgreSQL: SIGINT = fast shutdown; the Temporal CLI: SIGTERM).
 */
export function spawnBound(
  command: string,
  args: string[],
  options: SpawnOptions & { deathSignal?: string } = {},
): ChildProcess {
  const { deathSignal = 'TERM', ...rest } = options;
  if (setpriv && setprivHasDeathSignal) {
    return spawn(setpriv, [`--pdeathsig=${deathSignal}`, '--', command, ...args], rest);
  }
  warnOnceWithoutDeathSignal();
  return spawn(command, args, rest);
}

export function freePort(host = '127.0.0.1'): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.unref();
    server.once('error', reject);
    server.listen(0, host, () => {
      const { port } = server.address() as net.AddressInfo;
      server.close(() => resolve(port));
    });
  });
}

/** Whether a port on loopback is free now (for preferring well-known ports such as 7233). */
export function portIsFree(port: number, host = '127.0.0.1'): Promise<boolean> {
  return new Promise((resolve) => {
    const server = net.createServer();
    server.once('error', () => resolve(false));
    server.listen(port, host, () => server.close(() => resolve(true)));
  });
}

/** Polls `check` until it succeeds or the deadline passes; no fixed sleeps. */
export async function waitUntil(
  what: string,
  check: () => Promise<boolean>,
  options: { timeoutMs: number; intervalMs?: number; child?: ChildProcess },
) {
  const deadline = Date.now() + options.timeoutMs;
  let interval = options.intervalMs ?? 50;
  for (;;) {
    if (options.child && options.child.exitCode !== null) {
      throw new Error(`${what} exited with code ${options.child.exitCode} before it was ready`);
    }
    if (await check().catch(() => false)) return;
    if (Date.now() > deadline)
      throw new Error(`${what} was not ready after ${Math.round(options.timeoutMs / 1000)} s`);
    await new Promise((r) => setTimeout(r, interval));
    interval = Math.min(interval * 1.5, 500);
  }
}

export function canConnect(port: number, host = '127.0.0.1'): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = net.connect({ port, host });
    socket.once('connect', () => {
      socket.destroy();
      resolve(true);
    });
    socket.once('error', () => resolve(false));
  });
}

/** Sends `signal` and waits for the child to exit (SIGKILL after `graceMs`). */
export function stopChild(child: ChildProcess, signal: NodeJS.Signals, graceMs = 10_000): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve();
  return new Promise((resolve) => {
    const timer = setTimeout(() => child.kill('SIGKILL'), graceMs);
    child.once('exit', () => {
      clearTimeout(timer);
      resolve();
    });
    child.kill(signal);
  });
}
