/**
 * The production shape (`npm run build`, then `npm run serve` or the Docker image): the same
 * Node flags everywhere, and a compiled connector whose worker runs the workflow bundle the build
 * wrote instead of bundling its sources at start.
 */
import { expect } from 'chai';
import fs from 'node:fs';
import path from 'node:path';
import readline from 'node:readline';
import { PROJECT_ROOT, PRODUCTION_ENV, PRODUCTION_NODE_FLAGS } from '../config.js';
import { freePort, spawnBound, stopChild } from '../dev/processes.js';
import { connectorArgs, connectorEnv, ensureBuilt } from '../bench/connectors.js';
import { createTestDatabase, requireStack, TEST_KEY_ENCRYPTION_KEY, uniqueName } from './support/stack.js';
import { client } from './support/http.js';

describe('production run', function () {
  this.timeout(240_000);

  it('runs with the same Node flags and environment in the Dockerfile, npm run serve and the benches', () => {
    const dockerfile = fs.readFileSync(path.join(PROJECT_ROOT, 'Dockerfile'), 'utf8');
    const cmd = /^CMD (\[.*\])$/m.exec(dockerfile)?.[1];
    expect(JSON.parse(cmd ?? 'null')).to.deep.equal(['node', ...PRODUCTION_NODE_FLAGS, 'dist/main.js']);
    const assignments = Object.entries(PRODUCTION_ENV).map(([name, value]) => `${name}=${value}`);
    const dockerEnv = [...dockerfile.matchAll(/^ENV (.*)$/gm)].map((m) => m[1]).join(' ');
    for (const assignment of assignments) expect(dockerEnv).to.include(assignment);

    const pkg = JSON.parse(fs.readFileSync(path.join(PROJECT_ROOT, 'package.json'), 'utf8')) as {
      scripts: Record<string, string>;
    };
    expect(pkg.scripts.serve).to.equal(
      [...assignments, 'node', ...PRODUCTION_NODE_FLAGS, 'dist/main.js'].join(' '),
    );
    expect(connectorArgs('dist').slice(0, PRODUCTION_NODE_FLAGS.length)).to.deep.equal([
      ...PRODUCTION_NODE_FLAGS,
    ]);
    expect(connectorEnv('dist')).to.deep.equal(PRODUCTION_ENV);
  });

  it("starts compiled on the build's workflow bundle and serves", async () => {
    ensureBuilt(() => {}); // a no-op after `npm run build` (CI builds before it tests)
    const bundle = path.join(PROJECT_ROOT, 'dist', 'workflow-bundle.js');
    expect(fs.statSync(bundle).size).to.be.greaterThan(100_000);

    const port = await freePort();
    const child = spawnBound(process.execPath, connectorArgs('dist'), {
      cwd: PROJECT_ROOT,
      stdio: ['ignore', 'pipe', 'pipe'],
      env: {
        ...process.env,
        ...connectorEnv('dist'),
        DATABASE_URL: await createTestDatabase('serve'),
        TEMPORAL_ADDRESS: requireStack().temporal.address,
        TEMPORAL_TASK_QUEUE: uniqueName('serve'),
        KEY_ENCRYPTION_KEY: TEST_KEY_ENCRYPTION_KEY,
        DEMO_BACKEND: '0',
        LOG_LEVEL: 'info',
        PORT: String(port),
        PUBLIC_URL: `http://127.0.0.1:${port}`,
      },
    });
    const log: string[] = [];
    readline.createInterface({ input: child.stderr! }).on('line', (line) => log.push(line));
    try {
      const ready = await new Promise<{ url: string; adminKey: string }>((resolve, reject) => {
        readline.createInterface({ input: child.stdout! }).on('line', (line) => {
          if (line.startsWith('{"ready"')) resolve(JSON.parse(line) as { url: string; adminKey: string });
        });
        child.once('exit', (code) => reject(new Error(`exited (${code}):\n${log.join('\n')}`)));
      });
      const workflowLines = log.filter((l) => l.includes('workflow code:'));
      expect(workflowLines, log.join('\n')).to.have.length(1);
      expect(workflowLines[0]).to.include(`the build's bundle ${bundle}`);

      const api = client(ready.url, ready.adminKey);
      const answer = await api.get('/api/v1/sources');
      expect(answer.status, JSON.stringify(answer.body)).to.equal(200);
      expect(answer.body).to.have.property('items').that.is.an('array');
    } finally {
      await stopChild(child, 'SIGTERM', 20_000);
    }
  });
});
