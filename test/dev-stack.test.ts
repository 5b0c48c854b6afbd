/**
 * `npm start` as a user runs it: a real process with its embedded PostgreSQL and Temporal dev
 * server. Slow-ish (a few seconds per start), so only what a user relies on is here.
 */
import { expect } from 'chai';
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { PROJECT_ROOT } from '../config.js';
import { requireStack, createTestDatabase } from './support/stack.js';
import { client } from './support/http.js';
import { expectError } from './support/expect-error.js';

interface Started {
  child: ChildProcess;
  output: () => string;
  url: string;
  key: string | null;
}

function dataDir(): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'connector-start-'));
  fs.chmodSync(dir, 0o755);
  return dir;
}

/** Runs dev/start.ts (what `npm start` runs) and waits for its ready banner. */
function start(env: Record<string, string>): Promise<Started> {
  const child = spawn(process.execPath, ['--import', 'tsx', 'dev/start.ts'], {
    cwd: PROJECT_ROOT,
    env: { ...process.env, PORT: '0', DEMO_BACKEND_PORT: '0', LOG_LEVEL: 'warn', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  child.stdout.on('data', (c: Buffer) => (out += c.toString()));
  child.stderr.on('data', (c: Buffer) => (out += c.toString()));
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`not ready in 90 s:\n${out}`)), 90_000);
    const poll = setInterval(() => {
      const m = /Connector: +(http:\/\/\S+)/.exec(out);
      if (m && out.includes('Press Ctrl-C')) {
        clearInterval(poll);
        clearTimeout(timer);
        resolve({
          child,
          output: () => out,
          url: m[1]!,
          key: /(plk_[a-z0-9]{12}_[0-9a-f]{48})/.exec(out)?.[1] ?? null,
        });
      }
    }, 50);
    child.once('exit', (code) => {
      clearInterval(poll);
      clearTimeout(timer);
      reject(new Error(`exited with ${code} before it was ready:\n${out}`));
    });
  });
}

function stop(s: Started, signal: NodeJS.Signals = 'SIGINT'): Promise<number | null> {
  return new Promise((resolve) => {
    if (s.child.exitCode !== null) return resolve(s.child.exitCode);
    s.child.once('exit', (code) => resolve(code));
    s.child.kill(signal);
  });
}

/** Processes whose command line mentions the directory (our PostgreSQL and Temporal children). */
function processesUsing(dir: string): string[] {
  const r = spawnSync('pgrep', ['-af', dir], { encoding: 'utf8' });
  return r.stdout.split('\n').filter((l) => l.trim() && !l.includes('pgrep'));
}

async function gone(dir: string, ms = 10_000): Promise<string[]> {
  const deadline = Date.now() + ms;
  let left = processesUsing(dir);
  while (left.length && Date.now() < deadline) {
    await new Promise((r) => setTimeout(r, 100));
    left = processesUsing(dir);
  }
  return left;
}

describe('npm start (dev/start.ts) with the embedded stack', function () {
  this.timeout(180_000);

  it('starts, prints its URLs and the admin key once, keeps data across a restart and leaves nothing running', async () => {
    const dir = dataDir();
    const first = await start({ DATA_DIR: dir });
    expect(first.output()).to.match(/Temporal UI: +http:\/\/127\.0\.0\.1:\d+/);
    expect(first.output()).to.match(/Sample backend: +http:\/\/127\.0\.0\.1:\d+/);
    expect(first.key, first.output()).to.be.a('string');
    const ui = /Temporal UI: +(http:\/\/\S+)/.exec(first.output())![1]!;
    expect((await fetch(ui)).status).to.equal(200);
    const api = client(first.url, first.key!);
    expect((await api.get('/readyz')).status).to.equal(200);
    expect((await api.post('/api/v1/sources', { id: 'kept', name: 'Kept across restarts' })).status).to.equal(
      201,
    );
    expect(await stop(first)).to.equal(0);
    expect(first.output()).to.include('stopping…');
    expect(
      fs.readFileSync(path.join(dir, 'postgres', 'postgres.log'), 'utf8'),
      'a clean shutdown',
    ).to.include('database system is shut down');
    expect(await gone(dir)).to.deep.equal([]);

    const second = await start({ DATA_DIR: dir });
    try {
      expect(second.key, 'the admin key is shown on the very first start only').to.equal(null);
      const again = await client(second.url, first.key!).get('/api/v1/sources/kept');
      expect(again.status).to.equal(200);
      expect(again.body.name).to.equal('Kept across restarts');
    } finally {
      expect(await stop(second, 'SIGTERM')).to.equal(0);
    }
    expect(await gone(dir)).to.deep.equal([]);
  });

  it('leaves no orphan PostgreSQL or Temporal when the connector process is killed', async () => {
    const dir = dataDir();
    const s = await start({ DATA_DIR: dir });
    expect(processesUsing(dir).length, 'postgres and temporal run with the data directory').to.be.at.least(2);
    s.child.kill('SIGKILL');
    expect(await gone(dir)).to.deep.equal([]);
  });

  it('uses DATABASE_URL and TEMPORAL_ADDRESS instead of starting anything embedded', async () => {
    const dir = dataDir();
    const { temporal } = requireStack();
    const s = await start({
      DATA_DIR: dir,
      DATABASE_URL: await createTestDatabase('external'),
      TEMPORAL_ADDRESS: temporal.address,
      DEMO_BACKEND: '0',
    });
    try {
      expect(s.output()).to.include(`Temporal:         ${temporal.address} (external)`);
      expect(s.output()).not.to.include('starting PostgreSQL');
      expect(fs.existsSync(path.join(dir, 'postgres'))).to.equal(false);
      expect((await client(s.url).get('/readyz')).body.status).to.equal('ready');
      expectError(await client(s.url).get('/api/v1/sources'), 401, 'unauthenticated');
    } finally {
      await stop(s);
    }
  });

  it('stops at start-up on bad configuration, naming the variable', () => {
    for (const [name, value] of [
      ['PORT', 'eighty'],
      ['DATABASE_URL', 'mysql://x'],
      ['TEMPORAL_ADDRESS', 'no-port'],
      ['CONNECTOR_ROLES', 'api,gateway'],
      ['PUBLIC_URL', 'not a url'],
    ]) {
      const r = spawnSync(process.execPath, ['--import', 'tsx', 'dev/start.ts'], {
        cwd: PROJECT_ROOT,
        env: { ...process.env, [name!]: value },
        encoding: 'utf8',
        timeout: 30_000,
      });
      expect(r.status, `${name}=${value}: ${r.stderr}`).to.equal(2);
      expect(r.stderr).to.include(`"${name}"`);
    }
  });
});

describe('Temporal CLI resolution (dev/temporal.ts)', function () {
  this.timeout(60_000);

  /** Runs resolveTemporalCli in a child with a controlled PATH and cache, printing what it says. */
  function resolveWith(env: Record<string, string>, explicit: string | null = null) {
    const script = `import { resolveTemporalCli } from './dev/temporal.ts';
      try { const p = await resolveTemporalCli({ explicit: ${JSON.stringify(explicit)}, say: (l) => console.log('SAY ' + l) }); console.log('RESOLVED ' + p); }
      catch (e) { console.log('ERROR ' + e.message); }`;
    return spawnSync(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script], {
      cwd: PROJECT_ROOT,
      env: { ...process.env, ...env },
      encoding: 'utf8',
    });
  }

  const emptyCache = () => fs.mkdtempSync(path.join(os.tmpdir(), 'cache-'));
  const onlyNode = () => {
    const bin = fs.mkdtempSync(path.join(os.tmpdir(), 'bin-'));
    fs.symlinkSync(process.execPath, path.join(bin, 'node'));
    return bin;
  };

  it('refuses a TEMPORAL_CLI that is not a working binary', () => {
    const r = resolveWith({}, '/bin/false');
    expect(r.stdout).to.include('ERROR TEMPORAL_CLI=/bin/false is not a working temporal binary');
  });

  it('without a binary and without Go, says how to provide one', () => {
    const r = resolveWith({ PATH: onlyNode(), XDG_CACHE_HOME: emptyCache() });
    expect(r.stdout).to.include('ERROR The Temporal CLI was not found and Go is not installed');
    for (const option of ['TEMPORAL_CLI', "'temporal' on PATH", 'install Go', 'TEMPORAL_ADDRESS'])
      expect(r.stdout).to.include(option);
  });

  it('builds once with go install when needed, under a lock that a second process waits on', () => {
    // A stand-in `go` that takes a second and writes a `temporal` that answers --version.
    const bin = onlyNode();
    fs.writeFileSync(
      path.join(bin, 'go'),
      `#!/bin/sh\necho "go: downloading github.com/temporalio/cli v1.5.1"\nsleep 1\necho github.com/temporalio/cli/cmd/temporal\nprintf '#!/bin/sh\\necho temporal version fake\\n' > "$GOBIN/temporal"\nchmod +x "$GOBIN/temporal"\necho built >> "${'$'}{GO_CALLS}"\n`,
      { mode: 0o755 },
    );
    fs.symlinkSync('/bin/sh', path.join(bin, 'sh'));
    for (const tool of ['sleep', 'printf', 'chmod', 'echo']) {
      const found = spawnSync('sh', ['-c', `command -v ${tool}`], { encoding: 'utf8' }).stdout.trim();
      if (found.startsWith('/')) fs.symlinkSync(found, path.join(bin, tool));
    }
    const cache = emptyCache();
    const calls = path.join(cache, 'go-calls');
    const env = { PATH: bin, XDG_CACHE_HOME: cache, GO_CALLS: calls };
    const script = (n: number) =>
      `import { resolveTemporalCli } from './dev/temporal.ts'; const p = await resolveTemporalCli({ explicit: null, say: (l) => console.log('${n} ' + l) }); console.log('${n} RESOLVED ' + p);`;
    const both = spawnSync(
      '/bin/sh',
      [
        '-c',
        `"${process.execPath}" --import tsx --input-type=module -e "$A" & "${process.execPath}" --import tsx --input-type=module -e "$B"; wait`,
      ],
      {
        cwd: PROJECT_ROOT,
        env: { ...process.env, ...env, A: script(1), B: script(2) },
        encoding: 'utf8',
        timeout: 50_000,
      },
    );
    const target = path.join(cache, 'building-connector', 'temporal-cli-v1.5.1', 'temporal');
    expect(both.stdout).to.include(`1 RESOLVED ${target}`);
    expect(both.stdout).to.include(`2 RESOLVED ${target}`);
    expect(both.stdout).to.match(/Building the Temporal CLI/);
    expect(both.stdout).to.match(/waiting for another process .* building the Temporal CLI/);
    expect(both.stdout).to.match(/Temporal CLI built in \d+ s/);
    expect(fs.readFileSync(calls, 'utf8').trim().split('\n'), 'go install ran once').to.have.length(1);
    expect(fs.existsSync(path.join(path.dirname(target), '.build-lock'))).to.equal(false);
  });
});
