/**
 * Several instances of one provider connector for the data plane operations suite: instances
 * in this process with a logger whose lines the test reads, instances as child processes
 * (which can be killed outright), and a front door (the load balancer of a real deployment)
 * that all instances share as PUBLIC_URL. The front door can also tamper with data plane
 * answers on their way, as a man in the middle would.
 */
import http from 'node:http';
import path from 'node:path';
import readline from 'node:readline';
import { Writable } from 'node:stream';
import type { ChildProcess } from 'node:child_process';
import { pino } from 'pino';
import { loadConfig, PROJECT_ROOT } from '../../config.js';
import { startConnector } from '../../main.js';
import { freePort, spawnBound } from '../../dev/processes.js';
import {
  TEST_KEY_ENCRYPTION_KEY,
  createTestDatabase,
  requireStack,
  uniqueName,
  type TestConnector,
} from '../support/stack.js';

// eslint-disable-next-line @typescript-eslint/no-explicit-any -- log lines of every shape
export type LogLine = Record<string, any>;

/** A pino destination that keeps every line, and waits for the line a test expects. */
export class CapturedLog {
  readonly lines: LogLine[] = [];
  private waiters: Array<() => void> = [];

  readonly stream = new Writable({
    write: (chunk: Buffer, _enc, done) => {
      for (const text of chunk.toString('utf8').split('\n')) {
        if (!text) continue;
        try {
          this.lines.push(JSON.parse(text) as LogLine);
        } catch {
          this.lines.push({ msg: text });
        }
      }
      for (const w of this.waiters.splice(0)) w();
      done();
    },
  });

  find(match: (l: LogLine) => boolean): LogLine | undefined {
    return this.lines.find(match);
  }

  /** The first line that matches, waiting for it up to `ms`. */
  async waitFor(match: (l: LogLine) => boolean, ms: number, what: string): Promise<LogLine> {
    const deadline = Date.now() + ms;
    for (;;) {
      const line = this.find(match);
      if (line) return line;
      const left = deadline - Date.now();
      if (left <= 0) throw new Error(`no log line ${what} within ${ms} ms`);
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, left);
        this.waiters.push(() => {
          clearTimeout(timer);
          resolve();
        });
      });
    }
  }
}

/** startTestConnector with a logger the test reads (test/support/stack.ts makes a silent one). */
export async function startLoggedConnector(options: {
  name: string;
  env: Record<string, string>;
  log: CapturedLog;
  restartOf?: TestConnector;
}): Promise<TestConnector> {
  const { temporal, workflowBundle } = requireStack();
  const databaseUrl = options.restartOf?.databaseUrl ?? (await createTestDatabase(options.name));
  const taskQueue = options.restartOf?.taskQueue ?? uniqueName(`tq_${options.name}`);
  const config = loadConfig({
    PORT: '0',
    TEMPORAL_TASK_QUEUE: taskQueue,
    LOG_LEVEL: 'info',
    DEMO_BACKEND: '0',
    KEY_ENCRYPTION_KEY: TEST_KEY_ENCRYPTION_KEY,
    ...options.env,
  });
  const connector = await startConnector(config, {
    databaseUrl,
    temporalAddress: temporal.address,
    workflowBundle,
    logger: pino({ level: 'info' }, options.log.stream),
  });
  const adminKey = options.restartOf?.adminKey ?? connector.initialAdminKey;
  if (!adminKey) throw new Error('a fresh test database must yield an initial admin key');
  return { ...connector, adminKey, taskQueue, databaseUrl };
}

export interface ChildConnector {
  process: ChildProcess;
  pid: number;
  /** Where it listens (its PUBLIC_URL is the front door). */
  directUrl: string;
}

/** A connector process (bench/connector-process.ts under tsx); resolves once it is ready. */
export async function startChildConnector(env: Record<string, string>): Promise<ChildConnector> {
  const port = await freePort();
  const child = spawnBound(
    process.execPath,
    ['--import', 'tsx', path.join(PROJECT_ROOT, 'bench', 'connector-process.ts')],
    {
      cwd: PROJECT_ROOT,
      stdio: ['ignore', 'pipe', 'pipe'],
      env: {
        ...process.env,
        TEMPORAL_ADDRESS: requireStack().temporal.address,
        KEY_ENCRYPTION_KEY: TEST_KEY_ENCRYPTION_KEY,
        DEMO_BACKEND: '0',
        LOG_LEVEL: 'warn',
        PORT: String(port),
        ...env,
      },
    },
  );
  const tail: string[] = [];
  readline.createInterface({ input: child.stderr! }).on('line', (line) => {
    tail.push(line);
    if (tail.length > 20) tail.shift();
  });
  return new Promise<ChildConnector>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`not ready after 90 s:\n${tail.join('\n')}`)), 90_000);
    readline.createInterface({ input: child.stdout! }).on('line', (line) => {
      try {
        const ready = JSON.parse(line) as { ready?: boolean; pid: number };
        if (!ready.ready) return;
        clearTimeout(timer);
        resolve({ process: child, pid: ready.pid, directUrl: `http://127.0.0.1:${port}` });
      } catch {
        // not the ready line
      }
    });
    child.once('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`the connector exited (${code}) before it was ready:\n${tail.join('\n')}`));
    });
  });
}

/** SIGKILL: no clean stop, so its lease is not released. */
export async function killChild(child: ChildConnector): Promise<void> {
  if (child.process.exitCode !== null || child.process.signalCode !== null) return;
  const gone = new Promise((resolve) => child.process.once('exit', resolve));
  process.kill(child.pid, 'SIGKILL');
  await gone;
}

export interface DataplaneAnswer {
  path: string;
  status: number;
  headers: http.IncomingHttpHeaders;
  body: Buffer;
}

/**
 * The front door: forwards everything to the instance it points at. Data plane answers are
 * read whole and kept (`answers`); with `tamper` one byte of their body is changed (the
 * `platform_version` "1.0" becomes "1.9", still a valid answer), with `strip` the signature
 * header is dropped.
 */
export async function startFrontDoor() {
  const port = await freePort();
  const upstreamAgent = new http.Agent({ keepAlive: false });
  const door = {
    url: `http://127.0.0.1:${port}`,
    target: '',
    tamper: false,
    strip: false,
    /** When set, the front door answers data plane requests itself (a misbehaving peer). */
    fake: undefined as ((req: http.IncomingMessage, res: http.ServerResponse) => void) | undefined,
    answers: [] as DataplaneAnswer[],
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
  const server = http.createServer((req, res) => {
    const dataplane = (req.url ?? '').startsWith('/dataplane/');
    if (dataplane && door.fake) {
      req.resume();
      door.fake(req, res);
      return;
    }
    const target = new URL(req.url ?? '/', door.target);
    const upstream = http.request(
      target,
      // A new connection per request: no race with an instance closing an idle one.
      {
        method: req.method,
        headers: { ...req.headers, host: target.host, connection: 'close' },
        agent: upstreamAgent,
      },
      (answer) => {
        // Hop by hop: the instance's connection is not the client's.
        delete answer.headers.connection;
        delete answer.headers['keep-alive'];
        if (!dataplane) {
          res.writeHead(answer.statusCode ?? 502, answer.headers);
          answer.pipe(res);
          return;
        }
        const chunks: Buffer[] = [];
        answer.on('data', (c: Buffer) => chunks.push(c));
        answer.on('end', () => {
          let body = Buffer.concat(chunks);
          const headers = { ...answer.headers };
          door.answers.push({ path: req.url ?? '', status: answer.statusCode ?? 0, headers, body });
          if (door.tamper) {
            const at = body.indexOf('"platform_version":"1.0"');
            if (at >= 0) {
              body = Buffer.from(body);
              body[at + '"platform_version":"1.'.length] = '9'.charCodeAt(0);
            }
          }
          if (door.strip) delete headers['pl-evidence'];
          res.writeHead(answer.statusCode ?? 502, headers);
          res.end(body);
        });
      },
    );
    upstream.on('error', () => {
      if (!res.headersSent) res.writeHead(502, { 'content-type': 'text/plain' });
      res.end('the front door cannot reach the instance');
    });
    req.pipe(upstream);
  });
  await new Promise<void>((resolve) => server.listen(port, '127.0.0.1', resolve));
  return door;
}
export type FrontDoor = Awaited<ReturnType<typeof startFrontDoor>>;
