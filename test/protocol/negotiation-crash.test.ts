/**
 * A provider connector killed outright (SIGKILL: no graceful stop, activities and workflow
 * tasks cut off) in the middle of a negotiation, and started again on its database, task queue
 * and address: the negotiation completes on both sides. The provider runs as its own process
 * (bench/connector-process.ts), as in production.
 */
import { expect } from 'chai';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import readline from 'node:readline';
import type { ChildProcess } from 'node:child_process';
import { client, type Client } from '../support/http.js';
import {
  publishOffer,
  startDataspace,
  startParticipant,
  waitFor,
  type Participant,
} from '../support/dataspace.js';
import { TEST_KEY_ENCRYPTION_KEY, createTestDatabase, requireStack, uniqueName } from '../support/stack.js';
import { freePort, spawnBound } from '../../dev/processes.js';
import { PROJECT_ROOT } from '../../config.js';
import type { RunningAuthority } from '../../dev/authority/index.js';
import type { RunningBuildingBackend } from '../../dev/building-backend/index.js';

interface Child {
  process: ChildProcess;
  pid: number;
  url: string;
  did: string;
  adminKey: string | null;
}

/** Starts bench/connector-process.ts under tsx with `env`; resolves once it prints its ready line. */
async function startChild(env: Record<string, string>): Promise<Child> {
  const child = spawnBound(
    process.execPath,
    ['--import', 'tsx', path.join(PROJECT_ROOT, 'bench', 'connector-process.ts')],
    {
      cwd: PROJECT_ROOT,
      stdio: ['ignore', 'pipe', 'pipe'],
      env: { ...process.env, ...env },
    },
  );
  const tail: string[] = [];
  readline.createInterface({ input: child.stderr! }).on('line', (line) => {
    tail.push(line);
    if (tail.length > 20) tail.shift();
  });
  return new Promise<Child>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`not ready after 90 s:\n${tail.join('\n')}`)), 90_000);
    readline.createInterface({ input: child.stdout! }).on('line', (line) => {
      try {
        const ready = JSON.parse(line) as Omit<Child, 'process'> & { ready?: boolean };
        if (!ready.ready) return;
        clearTimeout(timer);
        resolve({ ...ready, process: child });
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

/** SIGKILL, and wait until it is gone. */
async function kill(child: Child) {
  const gone = new Promise((resolve) => child.process.once('exit', resolve));
  process.kill(child.pid, 'SIGKILL');
  await gone;
}

describe('a negotiation survives its provider being killed (SIGKILL) and restarted', function () {
  this.timeout(240_000);
  let authority: RunningAuthority;
  let backend: RunningBuildingBackend;
  let consumer: Participant;
  let provider: Child | undefined;
  let bundleDir: string;

  before(async () => {
    ({ authority, backend } = await startDataspace());
    consumer = await startParticipant('consumer', authority);
    // The child runs the workflow bundle the test stack already built (no second bundling).
    bundleDir = fs.mkdtempSync(path.join(os.tmpdir(), 'negotiation-crash-'));
    const { workflowBundle } = requireStack();
    fs.writeFileSync(path.join(bundleDir, 'workflows.js'), (workflowBundle as { code: string }).code);
  });
  after(async () => {
    if (provider && provider.process.exitCode === null) await kill(provider);
    await consumer?.connector.stop();
    await backend?.close();
    await authority?.close();
    fs.rmSync(bundleDir, { recursive: true, force: true });
  });

  it('completes on both sides after the provider is killed while a request awaits approval and again right after approval', async () => {
    const port = await freePort();
    const env = {
      DATABASE_URL: await createTestDatabase('crash_provider'),
      TEMPORAL_ADDRESS: requireStack().temporal.address,
      TEMPORAL_TASK_QUEUE: uniqueName('tq_crash_provider'),
      PORT: String(port),
      PUBLIC_URL: `http://127.0.0.1:${port}`,
      DID_WEB_ALLOW_HTTP: 'true',
      AUTHORITY_URL: authority.url,
      KEY_ENCRYPTION_KEY: TEST_KEY_ENCRYPTION_KEY,
      DEMO_BACKEND: '0',
      LOG_LEVEL: 'warn',
      BENCH_WORKFLOW_BUNDLE: path.join(bundleDir, 'workflows.js'),
    };
    provider = await startChild(env);
    const adminKey = provider.adminKey!;
    const did = provider.did;
    authority.upsert({ did, name: 'provider', roles: ['researcher'], active: true });
    const providerApi = (): Client => client(provider!.url, adminKey);
    await publishOffer({ api: providerApi() } as Participant, backend, 'manual', 'crash-offer');

    const started = await consumer.api.post('/api/v1/negotiations', {
      counterparty_address: `${provider.url}/dsp`,
      counterparty_did: did,
      offer_id: 'crash-offer',
      dataset_id: 'product-crash-offer',
    });
    expect(started.status, JSON.stringify(started.body)).to.equal(201);
    const list = async () =>
      (await providerApi().get('/api/v1/negotiations?role=provider&limit=50')).body.items as Array<{
        id: string;
        consumer_pid: string;
      }>;
    let theirs: { id: string } | undefined;
    for (let i = 0; i < 200 && !theirs; i++) {
      theirs = (await list()).find((n) => n.consumer_pid === started.body.consumer_pid);
      if (!theirs) await new Promise((r) => setTimeout(r, 50));
    }
    expect(theirs, 'the provider got the request').to.be.an('object');
    const id = encodeURIComponent(theirs!.id);
    await waitFor(providerApi(), theirs!.id, (n) => n.approval === 'pending');

    // Killed while the workflow waits for its operator.
    await kill(provider);
    provider = await startChild(env);
    expect(provider.did).to.equal(did);
    await waitFor(providerApi(), theirs!.id, (n) => n.approval === 'pending', 60_000);

    // Approved, and killed at once: the agreement is on its way (or about to be).
    const approved = await providerApi().post(`/api/v1/negotiations/${id}/approve`);
    expect(approved.status, JSON.stringify(approved.body)).to.equal(200);
    await kill(provider);
    provider = await startChild(env);

    const mine = await waitFor(consumer.api, started.body.id, (n) => n.state === 'FINALIZED', 90_000);
    const done = await waitFor(
      providerApi(),
      theirs!.id,
      (n) => n.state === 'FINALIZED' && n.outbox.length === 0,
      90_000,
    );
    expect(done.agreement_id).to.equal(mine.agreement_id);
    // Each message once: the restarts repeated nothing the counterparty could see twice.
    for (const type of ['ContractAgreementMessage', 'ContractNegotiationEventMessage']) {
      expect(
        done.history.filter((h: { message_type: string }) => h.message_type === type),
        type,
      ).to.have.length(1);
    }
    expect(
      mine.history.filter(
        (h: { message_type: string; direction: string }) =>
          h.message_type === 'ContractAgreementMessage' && h.direction === 'inbound',
      ),
    ).to.have.length(1);
    const agreement = await providerApi().get(`/api/v1/agreements/${encodeURIComponent(done.agreement_id)}`);
    expect(agreement.status).to.equal(200);
    const verified = await providerApi().get('/api/v1/evidence/chain/verify');
    expect(verified.body).to.include({ ok: true, first_broken_seq: null });
  });
});
