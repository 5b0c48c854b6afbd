/**
 * Two connectors run transfers over loopback HTTP with DSP 2025-1 after negotiating an
 * agreement: the whole life of a transfer on both sides, every operator action in every state,
 * the protocol's refusals, repeated messages, token renewal, and the end of an agreement from
 * either side.
 */
import { expect } from 'chai';
import { createHash, randomUUID } from 'node:crypto';
import http from 'node:http';
import { client, type Client } from '../support/http.js';
import { startTestConnector } from '../support/stack.js';
import { expectError } from '../support/expect-error.js';
import {
  publishOffer,
  startDataspace,
  startParticipant,
  waitFor,
  type Participant,
} from '../support/dataspace.js';
import type { RunningAuthority } from '../../dev/authority/index.js';
import type { RunningBuildingBackend } from '../../dev/building-backend/index.js';
import {
  endpointProperty,
  hashToken,
  verifyTransferToken,
  type DataAddress,
} from '../../gateway/dataplane/access.js';
import { MASK } from '../../domain/masking.js';
import { recordHistory } from '../support/histories.js';

const DSP_CONTEXT = ['https://w3id.org/dspace/2025/1/context.jsonld'];
const AGREEMENT_CONTEXT = [...DSP_CONTEXT, 'https://w3id.org/building-data/agreements/v1/context.jsonld'];
const ACTIONS = ['suspend', 'resume', 'complete', 'terminate'] as const;

// eslint-disable-next-line @typescript-eslint/no-explicit-any -- tests read transfers of every shape
type Json = any;

/** Polls a transfer until `done` holds (bounded); returns the last answer. */
async function waitTransfer(api: Client, id: string, done: (t: Json) => boolean, ms = 20_000): Promise<Json> {
  const deadline = Date.now() + ms;
  for (;;) {
    const res = await api.get(`/api/v1/transfers/${encodeURIComponent(id)}`);
    if (res.status === 200 && done(res.body)) return res.body;
    if (Date.now() > deadline)
      throw new Error(`transfer ${id} did not get there: ${JSON.stringify(res.body)}`);
    await new Promise((r) => setTimeout(r, 25));
  }
}

const token = (a: DataAddress) => endpointProperty(a, 'authorization')!;

/** A consumer's TransferRequestMessage for an agreement, as the protocol tests send it by hand. */
const transferRequest = (agreementId: string, consumerPid: string, callbackAddress: string) => ({
  '@context': DSP_CONTEXT,
  '@id': `urn:uuid:${randomUUID()}`,
  '@type': 'TransferRequestMessage',
  consumerPid,
  agreementId,
  format: 'HttpData-PULL',
  callbackAddress,
});

describe('transfer process between two connectors (DSP 2025-1)', function () {
  this.timeout(180_000);
  let authority: RunningAuthority;
  let backend: RunningBuildingBackend;
  let provider: Participant;
  let consumer: Participant;

  before(async () => {
    ({ authority, backend } = await startDataspace());
    // Short-lived tokens, so that the consumer renews them within a test.
    provider = await startParticipant('provider', authority, { TRANSFER_TOKEN_TTL: 'PT9S' });
    consumer = await startParticipant('consumer', authority);
    await publishOffer(provider, backend, 'automatic', 'transfer-offer');
  });
  after(async () => {
    await consumer?.connector.stop();
    await provider?.connector.stop();
    await backend?.close();
    await authority?.close();
  });

  /** Negotiates an agreement (FINALIZED on both sides); returns its id. */
  async function agreement(extra: Record<string, unknown> = {}): Promise<string> {
    const started = await consumer.api.post('/api/v1/negotiations', {
      counterparty_address: provider.dsp,
      counterparty_did: provider.did,
      offer_id: 'transfer-offer',
      dataset_id: 'product-transfer-offer',
      ...extra,
    });
    expect(started.status, JSON.stringify(started.body)).to.equal(201);
    const done = await waitFor(consumer.api, started.body.id, (n) => n.state === 'FINALIZED');
    // Each side stores the agreement right after it records FINALIZED.
    const deadline = Date.now() + 10_000;
    for (const side of [provider, consumer]) {
      while (
        (await side.api.get(`/api/v1/agreements/${encodeURIComponent(done.agreement_id)}`)).status !== 200
      ) {
        if (Date.now() > deadline) throw new Error('the agreement was never stored on both sides');
        await new Promise((r) => setTimeout(r, 25));
      }
    }
    return done.agreement_id as string;
  }

  /** The provider's side of a transfer the consumer started. */
  async function providerSide(consumerPid: string): Promise<Json> {
    const deadline = Date.now() + 10_000;
    for (;;) {
      const list = await provider.api.get('/api/v1/transfers?role=provider&limit=200');
      const found = list.body.items.find((t: { consumer_pid: string }) => t.consumer_pid === consumerPid);
      if (found) return found;
      if (Date.now() > deadline) throw new Error(`the provider never got ${consumerPid}`);
      await new Promise((r) => setTimeout(r, 25));
    }
  }

  /** A running transfer: both sides STARTED, the consumer holding its data address. */
  async function runningTransfer(agreementId: string) {
    const started = await consumer.api.post('/api/v1/transfers', { agreement_id: agreementId });
    expect(started.status, JSON.stringify(started.body)).to.equal(201);
    const c = await waitTransfer(
      consumer.api,
      started.body.id,
      (t) => t.state === 'STARTED' && t.data_address,
    );
    const p = await waitTransfer(
      provider.api,
      (await providerSide(c.consumer_pid)).id,
      (t) => t.state === 'STARTED',
    );
    return { c, p };
  }

  /** The consumer's stored (unmasked) data address. */
  async function storedAddress(id: string): Promise<DataAddress | null> {
    const row = await consumer.connector.db('transfers').where({ id }).first('data_address');
    return row.data_address as DataAddress | null;
  }

  /** Saves a finished transfer's history for the replay suite (RECORD_HISTORIES=1). */
  async function recordFinished(side: Participant, id: string, name: string) {
    const row = await side.connector.db('transfers').where({ id }).first('workflow_id');
    await side.connector.temporal.workflow.getHandle(row.workflow_id).result();
    await recordHistory(side.connector, row.workflow_id, name);
  }

  const act = (side: Participant, id: string, action: string) =>
    side.api.post(`/api/v1/transfers/${encodeURIComponent(id)}/${action}`);

  const asConsumer = async () => ({
    authorization: `Bearer ${await consumer.connector.identity.issueToken(provider.did)}`,
  });

  let agreementId: string;

  it('runs a transfer through start, suspension, resumption from either side and completion', async () => {
    agreementId = await agreement();
    const started = await consumer.api.post('/api/v1/transfers', { agreement_id: agreementId });
    expect(started.status, JSON.stringify(started.body)).to.equal(201);
    expect(started.body).to.include({
      role: 'consumer',
      agreement_id: agreementId,
      counterparty_did: provider.did,
      counterparty_address: provider.dsp,
      format: 'HttpData-PULL',
      dataset_id: 'product-transfer-offer',
      counterparty_name: 'provider',
    });
    expect(started.body.state).to.be.oneOf(['REQUESTED', 'STARTED']);
    const c = await waitTransfer(
      consumer.api,
      started.body.id,
      (t) => t.state === 'STARTED' && t.data_address,
    );
    expect(c.provider_pid).to.match(/^urn:uuid:/);
    expect(c.dataplane_endpoint).to.equal(`${provider.connector.url}/dataplane/v1`);
    expect(c.dataplane_id).to.equal(provider.did);
    expect(c.flow_state).to.equal('ready');
    // Masked in every read, whole in the database for the gateway.
    expect(endpointProperty(c.data_address, 'authorization')).to.equal(MASK);
    const first = (await storedAddress(c.id))!;
    expect(token(first)).to.match(/^dpt_/);
    expect(await verifyTransferToken(provider.connector.db, token(first))).to.include({ agreementId });
    // The evidence of the start message on both sides names the token by its digest only.
    for (const side of [provider, consumer]) {
      const evidence = async (text: string) =>
        Number(
          (
            await side.connector
              .db('evidence')
              .whereRaw("convert_from(canonical, 'UTF8') like ?", [`%${text}%`])
              .count<Array<{ count: string }>>('* as count')
          )[0]!.count,
        );
      expect(await evidence(token(first)), 'token in the evidence').to.equal(0);
      expect(await evidence(`sha256:${hashToken(token(first))}`), 'digest in the evidence').to.equal(1);
    }

    const p = await waitTransfer(
      provider.api,
      (await providerSide(c.consumer_pid)).id,
      (t) => t.state === 'STARTED',
    );
    expect(p).to.include({
      role: 'provider',
      id: c.provider_pid,
      consumer_pid: c.consumer_pid,
      counterparty_did: consumer.did,
      dataplane_id: provider.did,
      flow_state: 'started',
      counterparty_name: 'consumer',
    });
    expect(endpointProperty(p.data_address, 'authorization')).to.equal(MASK);
    const row = await provider.connector
      .db('transfers')
      .where({ id: p.id })
      .first('workflow_id', 'data_address');
    expect(JSON.stringify(row.data_address)).not.to.include(token(first));
    const desc = await provider.connector.temporal.workflow.getHandle(row.workflow_id).describe();
    const attrs = desc.searchAttributes as Record<string, unknown[]>;
    expect(attrs.ConnectorProcess).to.deep.equal(['transfer']);
    expect(attrs.ConnectorRole).to.deep.equal(['provider']);
    expect(attrs.ConnectorState).to.deep.equal(['STARTED']);
    expect(attrs.Counterparty).to.deep.equal([consumer.did]);

    // The consumer suspends: the provider follows and the token stops working at once.
    const suspended = await act(consumer, c.id, 'suspend');
    expect(suspended.status, JSON.stringify(suspended.body)).to.equal(200);
    expect(suspended.body).to.include({ state: 'SUSPENDED', flow_state: 'suspended', data_address: null });
    await waitTransfer(provider.api, p.id, (t) => t.state === 'SUSPENDED' && t.flow_state === 'suspended');
    expect(await verifyTransferToken(provider.connector.db, token(first))).to.equal(undefined);

    // The provider resumes: a fresh token reaches the consumer.
    const resumed = await act(provider, p.id, 'resume');
    expect(resumed.status, JSON.stringify(resumed.body)).to.equal(200);
    expect(resumed.body).to.include({ state: 'STARTED', flow_state: 'started' });
    await waitTransfer(consumer.api, c.id, (t) => t.state === 'STARTED' && t.data_address);
    const second = (await storedAddress(c.id))!;
    expect(token(second)).not.to.equal(token(first));
    expect(await verifyTransferToken(provider.connector.db, token(second))).to.include({ transferId: p.id });

    // The provider suspends, the consumer resumes: the provider answers with a fresh address.
    expect((await act(provider, p.id, 'suspend')).body.state).to.equal('SUSPENDED');
    await waitTransfer(consumer.api, c.id, (t) => t.state === 'SUSPENDED');
    expect(await verifyTransferToken(provider.connector.db, token(second))).to.equal(undefined);
    const byConsumer = await act(consumer, c.id, 'resume');
    expect(byConsumer.body).to.include({ state: 'STARTED', flow_state: 'awaiting_address' });
    await waitTransfer(consumer.api, c.id, (t) => t.flow_state === 'ready');
    const third = (await storedAddress(c.id))!;
    expect(token(third)).not.to.be.oneOf([token(first), token(second)]);
    await waitTransfer(provider.api, p.id, (t) => t.state === 'STARTED');

    // Completion ends both sides and the access.
    const completed = await act(consumer, c.id, 'complete');
    expect(completed.body).to.include({ state: 'COMPLETED', data_address: null });
    const pDone = await waitTransfer(provider.api, p.id, (t) => t.state === 'COMPLETED');
    expect(pDone.flow_state).to.equal('completed');
    expect(await verifyTransferToken(provider.connector.db, token(third))).to.equal(undefined);
    const cDone = await waitTransfer(consumer.api, c.id, (t) => t.outbox.length === 0);
    expect(cDone.history.map((h: { message_type: string | null }) => h.message_type)).to.include.members([
      'TransferRequestMessage',
      'TransferStartMessage',
      'TransferSuspensionMessage',
      'TransferCompletionMessage',
    ]);
    for (const h of [...cDone.history, ...pDone.history])
      expect(h.evidence_id, JSON.stringify(h)).to.match(/^ev_/);
    await recordFinished(consumer, c.id, 'transfer-consumer-lifecycle');
    await recordFinished(provider, p.id, 'transfer-provider-lifecycle');
    for (const side of [provider, consumer]) {
      const kinds = (await side.connector.db('evidence').distinct('kind')).map(
        (r: { kind: string }) => r.kind,
      );
      expect(kinds).to.include.members([
        'dsp.inbound',
        'dsp.outbound',
        'transfer.state',
        'operator.decision',
      ]);
      expect((await side.api.get('/api/v1/evidence/chain/verify')).body).to.include({ ok: true });
    }
  });

  it('allows each operator action only in the states where it is possible (conflict otherwise), on both sides', async () => {
    const { c, p } = await runningTransfer(agreementId);
    const expectConflicts = async (state: string, refused: readonly string[]) => {
      for (const [side, id] of [
        [consumer, c.id],
        [provider, p.id],
      ] as const) {
        for (const action of refused)
          expectError(await act(side, id, action), 409, 'conflict', state.toLowerCase());
      }
    };
    // STARTED: resume is not possible.
    await expectConflicts('started', ['resume']);
    expect((await act(provider, p.id, 'suspend')).body.state).to.equal('SUSPENDED');
    await waitTransfer(consumer.api, c.id, (t) => t.state === 'SUSPENDED');
    // SUSPENDED: suspend and complete are not possible.
    await expectConflicts('suspended', ['suspend', 'complete']);
    expect((await act(consumer, c.id, 'terminate')).body).to.include({ state: 'TERMINATED' });
    const ended = await waitTransfer(provider.api, p.id, (t) => t.state === 'TERMINATED');
    expect(ended.error).to.include('terminate');
    await waitTransfer(consumer.api, c.id, (t) => t.outbox.length === 0);
    // TERMINATED: nothing is possible.
    await expectConflicts('terminated', ACTIONS);

    // COMPLETED: nothing is possible; and terminate from STARTED on the provider's side.
    const other = await runningTransfer(agreementId);
    expect((await act(provider, other.p.id, 'complete')).body.state).to.equal('COMPLETED');
    await waitTransfer(consumer.api, other.c.id, (t) => t.state === 'COMPLETED');
    for (const action of ACTIONS) {
      expectError(await act(provider, other.p.id, action), 409, 'conflict');
      expectError(await act(consumer, other.c.id, action), 409, 'conflict');
    }
    const third = await runningTransfer(agreementId);
    expect((await act(provider, third.p.id, 'terminate')).body.state).to.equal('TERMINATED');
    const seen = await waitTransfer(consumer.api, third.c.id, (t) => t.state === 'TERMINATED');
    expect(seen.data_address).to.equal(null);
    expect(seen.error).to.include('terminated');

    expectError(
      await act(consumer, 'urn:uuid:00000000-0000-4000-8000-000000000000', 'suspend'),
      404,
      'not_found',
    );
    expectError(await act(consumer, c.id, 'pause'), 404, 'not_found', 'pause');
  });

  it('lists transfers with cursor paging and filters', async () => {
    const page = await consumer.api.get('/api/v1/transfers?limit=2&role=consumer');
    expect(page.status).to.equal(200);
    expect(page.body.items).to.have.length(2);
    expect(page.body.next_cursor).to.be.a('string');
    const next = await consumer.api.get(
      `/api/v1/transfers?limit=2&role=consumer&cursor=${page.body.next_cursor}`,
    );
    expect(next.body.items[0].id).not.to.equal(page.body.items[0].id);
    const terminated = await consumer.api.get('/api/v1/transfers?state=TERMINATED');
    expect(terminated.body.items.every((t: { state: string }) => t.state === 'TERMINATED')).to.equal(true);
    expect((await consumer.api.get('/api/v1/transfers?role=provider')).body.items).to.deep.equal([]);
    expectError(await consumer.api.get('/api/v1/transfers?state=RUNNING'), 400, 'invalid_request', 'state');
    expectError(await consumer.api.get('/api/v1/transfers/nope'), 404, 'not_found');
    expectError(
      await consumer.api.post('/api/v1/transfers', { agreement_id: agreementId, format: 'HttpData-PUSH' }),
      400,
      'invalid_request',
      'format',
    );
    expectError(await consumer.api.post('/api/v1/transfers', { agreement_id: 'nope' }), 404, 'not_found');
    expectError(
      await provider.api.post('/api/v1/transfers', { agreement_id: agreementId }),
      400,
      'invalid_request',
      'agreement_id',
    );
  });

  it('answers a repeated request with the same process, and refuses what it cannot serve (TransferError)', async () => {
    const dsp = client(provider.dsp);
    const consumerPid = `urn:uuid:${randomUUID()}`;
    // Nobody answers at the callback: the provider's start cannot be delivered, which does not matter.
    const request = transferRequest(agreementId, consumerPid, 'http://127.0.0.1:9/dsp');
    const first = await dsp.post('/transfers/request', request, await asConsumer());
    expect(first.status, JSON.stringify(first.body)).to.equal(201);
    expect(first.body).to.include({ '@type': 'TransferProcess', consumerPid, state: 'REQUESTED' });
    expect(first.body['@context']).to.deep.equal(DSP_CONTEXT);
    const again = await dsp.post(
      '/transfers/request',
      { ...request, '@id': `urn:uuid:${randomUUID()}` },
      await asConsumer(),
    );
    expect(again.status).to.equal(201);
    expect(again.body.providerPid).to.equal(first.body.providerPid);
    const all = (await provider.api.get('/api/v1/transfers?role=provider&limit=200')).body.items.filter(
      (t: { consumer_pid: string }) => t.consumer_pid === consumerPid,
    );
    expect(all).to.have.length(1);
    const read = await dsp.get(
      `/transfers/${encodeURIComponent(first.body.providerPid)}`,
      await asConsumer(),
    );
    expect(read.status).to.equal(200);
    expect(read.body).to.include({
      '@type': 'TransferProcess',
      providerPid: first.body.providerPid,
      consumerPid,
    });

    const refused = async (body: Record<string, unknown>, status: number, code: string) => {
      const res = await dsp.post('/transfers/request', body, await asConsumer());
      expect(res.status, JSON.stringify(res.body)).to.equal(status);
      expect(res.body).to.include({ '@type': 'TransferError', code });
      expect(res.body['@context']).to.deep.equal(DSP_CONTEXT);
      expect(res.body.reason).to.be.an('array').that.is.not.empty;
      return res;
    };
    const fresh = () => ({
      ...request,
      consumerPid: `urn:uuid:${randomUUID()}`,
      '@id': `urn:uuid:${randomUUID()}`,
    });
    await refused({ ...fresh(), agreementId: 'urn:uuid:no-such-agreement' }, 400, 'unknown_agreement');
    await refused({ ...fresh(), format: 'HttpData-PUSH' }, 400, 'unsupported_format');
    const invalid = await refused({ ...fresh(), callbackAddress: undefined }, 400, 'invalid_message');
    expect(invalid.body.reason[0]).to.include('callbackAddress');
    // The callbackAddress is bound to the caller as for a negotiation: no transfer comes of it.
    for (const [callbackAddress, reason] of [
      ['https://example.com/dsp', "not on the caller's host"],
      ['http://10.1.2.3/dsp', 'https'],
      ['http://user:pw@127.0.0.1:1/dsp', 'credentials'],
      ['http://127.0.0.1:1/dsp?x=1', 'query'],
    ]) {
      const body = { ...fresh(), callbackAddress };
      const res = await refused(body, 400, 'invalid_callback');
      expect(res.body.reason[0], callbackAddress).to.include(reason!);
      expect(res.body.consumerPid).to.equal(body.consumerPid);
      const made = (await provider.api.get('/api/v1/transfers?role=provider&limit=200')).body.items.filter(
        (t: { consumer_pid: string }) => t.consumer_pid === body.consumerPid,
      );
      expect(made).to.deep.equal([]);
    }

    // Another member is not a party to this agreement: as unknown to it as a missing one.
    const outsider = await startParticipant('outsider', authority);
    try {
      const res = await dsp.post('/transfers/request', fresh(), {
        authorization: `Bearer ${await outsider.connector.identity.issueToken(provider.did)}`,
      });
      expect(res.status).to.equal(400);
      expect(res.body).to.include({ '@type': 'TransferError', code: 'unknown_agreement' });
      const theirs = await dsp.get(`/transfers/${encodeURIComponent(first.body.providerPid)}`, {
        authorization: `Bearer ${await outsider.connector.identity.issueToken(provider.did)}`,
      });
      expect(theirs.status).to.equal(404);
      expect(theirs.body['@type']).to.equal('TransferError');
    } finally {
      await outsider.connector.stop();
    }
    const anonymous = await dsp.post('/transfers/request', fresh());
    expect(anonymous.status).to.equal(401);
    expect(anonymous.body).to.include({ '@type': 'TransferError', code: 'missing_token' });
  });

  it('ends a transfer whose message the counterparty refuses, and tells the counterparty (delivery_failed)', async () => {
    // A consumer endpoint under the test's control: it refuses the provider's start and takes
    // the termination that follows.
    const received: Array<{ path: string; body: Json }> = [];
    const peer = http.createServer((req, res) => {
      let raw = '';
      req.on('data', (c: Buffer) => (raw += c.toString()));
      req.on('end', () => {
        received.push({ path: req.url ?? '', body: raw ? JSON.parse(raw) : {} });
        const refuse = req.url?.endsWith('/start');
        res.writeHead(refuse ? 400 : 200, { 'content-type': 'application/json' });
        res.end(
          refuse
            ? JSON.stringify({
                '@context': DSP_CONTEXT,
                '@type': 'TransferError',
                code: 'not_now',
                reason: ['no'],
              })
            : '{}',
        );
      });
    });
    await new Promise<void>((resolve) => peer.listen(0, '127.0.0.1', resolve));
    try {
      const { port } = peer.address() as { port: number };
      const consumerPid = `urn:uuid:${randomUUID()}`;
      const dsp = client(provider.dsp);
      const opened = await dsp.post(
        '/transfers/request',
        transferRequest(agreementId, consumerPid, `http://127.0.0.1:${port}/dsp`),
        await asConsumer(),
      );
      expect(opened.status, JSON.stringify(opened.body)).to.equal(201);
      const ended = await waitTransfer(
        provider.api,
        (await providerSide(consumerPid)).id,
        (t) => t.state === 'TERMINATED',
      );
      expect(ended.error).to.include('400');

      const deadline = Date.now() + 15_000;
      while (!received.some((r) => r.path.endsWith('/termination')) && Date.now() < deadline)
        await new Promise((r) => setTimeout(r, 25));
      const termination = received.find((r) => r.path.endsWith('/termination'));
      expect(termination, JSON.stringify(received)).to.exist;
      expect(decodeURIComponent(termination!.path)).to.equal(`/dsp/transfers/${consumerPid}/termination`);
      expect(termination!.body).to.include({
        '@type': 'TransferTerminationMessage',
        providerPid: opened.body.providerPid,
        consumerPid,
        code: 'delivery_failed',
      });
      expect(termination!.body.reason[0]).to.include('TransferStartMessage was not delivered');
      expect(received.filter((r) => r.path.endsWith('/start'))).to.have.length(1);
    } finally {
      await new Promise((resolve) => peer.close(resolve));
    }
  });

  it('refuses illegal transitions with 400 and unknown processes with 404; a repeated message changes nothing', async () => {
    const { c, p } = await runningTransfer(agreementId);
    const dsp = client(provider.dsp);
    const message = (type: string, extra: Record<string, unknown> = {}) => ({
      '@context': DSP_CONTEXT,
      '@id': `urn:uuid:${randomUUID()}`,
      '@type': type,
      providerPid: p.id,
      consumerPid: c.consumer_pid,
      ...extra,
    });
    const at = (suffix: string) => `/transfers/${encodeURIComponent(p.id)}/${suffix}`;
    // A start from the consumer is a resume: illegal while STARTED.
    const illegal = await dsp.post(at('start'), message('TransferStartMessage'), await asConsumer());
    expect(illegal.status).to.equal(400);
    expect(illegal.body).to.include({
      '@type': 'TransferError',
      code: 'invalid_transition',
      providerPid: p.id,
      consumerPid: c.consumer_pid,
    });
    expect(illegal.body.reason[0]).to.include('STARTED');

    // The same suspension twice: the same answer, one effect.
    const suspension = message('TransferSuspensionMessage', {
      code: 'maintenance',
      reason: ['backend update'],
    });
    const once = await dsp.post(at('suspension'), suspension, await asConsumer());
    const twice = await dsp.post(at('suspension'), suspension, await asConsumer());
    expect(once.status, JSON.stringify(once.body)).to.equal(200);
    expect(twice.status).to.equal(200);
    expect(twice.body).to.deep.equal(once.body);
    expect(once.body).to.include({ '@type': 'TransferProcess', state: 'SUSPENDED' });
    const after = (await provider.api.get(`/api/v1/transfers/${encodeURIComponent(p.id)}`)).body;
    expect(
      after.history.filter((h: { message_type: string }) => h.message_type === 'TransferSuspensionMessage'),
    ).to.have.length(1);
    // Completion is not possible from SUSPENDED.
    const completion = await dsp.post(
      at('completion'),
      message('TransferCompletionMessage'),
      await asConsumer(),
    );
    expect(completion.status).to.equal(400);
    expect(completion.body.code).to.equal('invalid_transition');
    // A message naming another process than its address.
    const mismatch = await dsp.post(
      at('termination'),
      message('TransferTerminationMessage', { providerPid: 'urn:uuid:x' }),
      await asConsumer(),
    );
    expect(mismatch.status).to.equal(400);
    expect(mismatch.body.code).to.equal('pid_mismatch');
    // The right address, but the consumer names another of its processes: refused, nothing happens.
    const otherProcess = await dsp.post(
      at('termination'),
      message('TransferTerminationMessage', { consumerPid: `urn:uuid:${randomUUID()}` }),
      await asConsumer(),
    );
    expect(otherProcess.status, JSON.stringify(otherProcess.body)).to.equal(400);
    expect(otherProcess.body).to.include({
      '@type': 'TransferError',
      code: 'pid_mismatch',
      providerPid: p.id,
      consumerPid: c.consumer_pid,
    });
    expect((await provider.api.get(`/api/v1/transfers/${encodeURIComponent(p.id)}`)).body.state).to.equal(
      'SUSPENDED',
    );
    // The same on the consumer's callback side: a providerPid other than the one it knows.
    const consumerState = (await consumer.api.get(`/api/v1/transfers/${encodeURIComponent(c.id)}`)).body
      .state;
    const wrongProvider = await client(consumer.dsp).post(
      `/transfers/${encodeURIComponent(c.id)}/termination`,
      { ...message('TransferTerminationMessage'), providerPid: `urn:uuid:${randomUUID()}` },
      { authorization: `Bearer ${await provider.connector.identity.issueToken(consumer.did)}` },
    );
    expect(wrongProvider.status, JSON.stringify(wrongProvider.body)).to.equal(400);
    expect(wrongProvider.body).to.include({ '@type': 'TransferError', code: 'pid_mismatch' });
    expect((await consumer.api.get(`/api/v1/transfers/${encodeURIComponent(c.id)}`)).body.state).to.equal(
      consumerState,
    );
    // Termination, then the same kind again: the same state, no second effect, also once the workflow ended.
    const terminated = await dsp.post(
      at('termination'),
      message('TransferTerminationMessage'),
      await asConsumer(),
    );
    expect(terminated.body.state).to.equal('TERMINATED');
    await waitTransfer(provider.api, p.id, (t) => t.state === 'TERMINATED');
    const repeat = await dsp.post(
      at('termination'),
      message('TransferTerminationMessage'),
      await asConsumer(),
    );
    expect(repeat.status).to.equal(200);
    expect(repeat.body.state).to.equal('TERMINATED');
    const late = await dsp.post(at('suspension'), message('TransferSuspensionMessage'), await asConsumer());
    expect(late.status).to.equal(400);
    expect(late.body.code).to.equal('invalid_transition');

    const unknownPid = 'urn:uuid:00000000-0000-4000-8000-000000000000';
    const unknown = await dsp.post(
      `/transfers/${unknownPid}/termination`,
      { ...message('TransferTerminationMessage'), providerPid: unknownPid },
      await asConsumer(),
    );
    expect(unknown.status).to.equal(404);
    expect(unknown.body).to.include({ '@type': 'TransferError', code: 'not_found' });
    // The consumer's callback side answers the same way.
    const callback = await client(consumer.dsp).post(
      `/transfers/${unknownPid}/start`,
      { ...message('TransferStartMessage'), consumerPid: unknownPid },
      { authorization: `Bearer ${await provider.connector.identity.issueToken(consumer.did)}` },
    );
    expect(callback.status).to.equal(404);
    expect(callback.body['@type']).to.equal('TransferError');
    const read = await client(consumer.dsp).get(`/transfers/${encodeURIComponent(c.id)}`, {
      authorization: `Bearer ${await provider.connector.identity.issueToken(consumer.did)}`,
    });
    expect(read.body).to.include({ '@type': 'TransferProcess', consumerPid: c.consumer_pid });
  });

  it('renews the data address before its token expires; the renewed token works', async () => {
    const { c, p } = await runningTransfer(agreementId);
    const before = (await storedAddress(c.id))!;
    const renewed = await waitTransfer(
      consumer.api,
      c.id,
      (t) => t.history.some((h: { note: string | null }) => h.note === 'data address renewed'),
      30_000,
    );
    expect(renewed.flow_state).to.equal('ready');
    const now = (await storedAddress(c.id))!;
    expect(token(now)).not.to.equal(token(before));
    expect(Date.parse(endpointProperty(now, 'expiresAt')!)).to.be.greaterThan(
      Date.parse(endpointProperty(before, 'expiresAt')!),
    );
    expect(await verifyTransferToken(provider.connector.db, token(now))).to.include({ transferId: p.id });
    expect((await act(consumer, c.id, 'terminate')).body.state).to.equal('TERMINATED');
  });

  it('ends an agreement from the consumer: running transfers end on both sides, the same message gets the same answer', async () => {
    const id = await agreement();
    const { c, p } = await runningTransfer(id);
    const address = (await storedAddress(c.id))!;
    const path = `/api/v1/agreements/${encodeURIComponent(id)}/terminate`;
    expectError(await consumer.api.post(path, { reason: 'x'.repeat(501) }), 400, 'invalid_request', 'reason');
    const ended = await consumer.api.post(path, { reason: 'project finished' });
    expect(ended.status, JSON.stringify(ended.body)).to.equal(200);
    expect(ended.body).to.include({
      id,
      state: 'ended',
      ended_by: 'consumer',
      end_reason: 'project finished',
    });
    expect(ended.body.transfers).to.deep.equal([c.id]);
    const cEnd = await waitTransfer(consumer.api, c.id, (t) => t.state === 'TERMINATED');
    expect(cEnd.error).to.include('agreement was ended by the consumer');
    const pEnd = await waitTransfer(provider.api, p.id, (t) => t.state === 'TERMINATED');
    expect(pEnd.error).to.include('project finished');
    expect(await verifyTransferToken(provider.connector.db, token(address))).to.equal(undefined);
    const theirs = await waitAgreement(provider.api, id, (a) => a.state === 'ended');
    expect(theirs).to.include({ ended_by: 'consumer' });

    // The message itself, again: the same answer.
    const dsp = client(provider.dsp);
    const message = {
      '@context': AGREEMENT_CONTEXT,
      '@id': `urn:uuid:${randomUUID()}`,
      '@type': 'AgreementTerminationMessage',
      agreementId: id,
      code: 'terminated',
      reason: ['project finished'],
    };
    const once = await dsp.post(
      `/agreements/${encodeURIComponent(id)}/termination`,
      message,
      await asConsumer(),
    );
    const twice = await dsp.post(
      `/agreements/${encodeURIComponent(id)}/termination`,
      message,
      await asConsumer(),
    );
    expect(once.status, JSON.stringify(once.body)).to.equal(200);
    expect(twice.body).to.deep.equal(once.body);
    expect(once.body).to.deep.include({
      '@context': AGREEMENT_CONTEXT,
      '@type': 'AgreementTermination',
      agreementId: id,
      state: 'ENDED',
      endedBy: 'consumer',
    });
    expect(Date.parse(once.body.endedAt)).to.be.a('number').and.not.NaN;

    // Nothing new under an ended agreement.
    expectError(await consumer.api.post('/api/v1/transfers', { agreement_id: id }), 409, 'conflict', 'ended');
    expectError(await consumer.api.post(path, {}), 409, 'conflict', 'ended');
    const request = await dsp.post(
      '/transfers/request',
      transferRequest(id, `urn:uuid:${randomUUID()}`, consumer.dsp),
      await asConsumer(),
    );
    expect(request.status).to.equal(400);
    expect(request.body).to.include({ '@type': 'TransferError', code: 'agreement_ended' });

    // Refusals in the protocol's error shape.
    const refusal = (res: { status: number; body: Json }, status: number, code: string) => {
      expect(res.status, JSON.stringify(res.body)).to.equal(status);
      expect(res.body).to.include({ '@type': 'AgreementError', code });
      expect(res.body['@context']).to.deep.equal(AGREEMENT_CONTEXT);
      expect(res.body.reason).to.be.an('array').that.is.not.empty;
    };
    refusal(
      await dsp.post(`/agreements/${encodeURIComponent(id)}/termination`, message),
      401,
      'missing_token',
    );
    refusal(
      await dsp.post(
        `/agreements/${encodeURIComponent(id)}/termination`,
        { ...message, '@context': DSP_CONTEXT },
        await asConsumer(),
      ),
      400,
      'invalid_message',
    );
    refusal(
      await dsp.post(
        `/agreements/${encodeURIComponent(id)}/termination`,
        { ...message, agreementId: 'other' },
        await asConsumer(),
      ),
      400,
      'id_mismatch',
    );
    refusal(
      await dsp.post(
        '/agreements/urn:uuid:nope/termination',
        { ...message, agreementId: 'urn:uuid:nope' },
        await asConsumer(),
      ),
      404,
      'not_found',
    );
    await waitAgreementOutbox(consumer, id);
  });

  it('refuses an agreement termination carrying what cannot be stored (NUL), from a peer or an operator', async () => {
    const id = await agreement();
    const path = `/api/v1/agreements/${encodeURIComponent(id)}/terminate`;
    expectError(await consumer.api.post(path, { reason: 'done\u0000' }), 400, 'invalid_request', 'reason');
    const dsp = client(provider.dsp);
    const message = {
      '@context': AGREEMENT_CONTEXT,
      '@id': `urn:uuid:${randomUUID()}`,
      '@type': 'AgreementTerminationMessage',
      agreementId: id,
      code: 'terminated',
      reason: ['done\u0000'],
    };
    const at = `/agreements/${encodeURIComponent(id)}/termination`;
    const refused = await dsp.post(at, message, await asConsumer());
    expect(refused.status, JSON.stringify(refused.body)).to.equal(400);
    expect(refused.body).to.include({ '@type': 'AgreementError', code: 'invalid_message', agreementId: id });
    const withCode = await dsp.post(
      at,
      { ...message, code: 'x\u0000', reason: ['done'] },
      await asConsumer(),
    );
    expect(withCode.status, JSON.stringify(withCode.body)).to.equal(400);
    for (const side of [provider, consumer])
      expect((await side.api.get(`/api/v1/agreements/${encodeURIComponent(id)}`)).body.state).to.equal(
        'active',
      );
    // Nothing was left halfway: the agreement still ends as usual.
    const ended = await consumer.api.post(path, { reason: 'done' });
    expect(ended.status, JSON.stringify(ended.body)).to.equal(200);
    expect((await waitAgreement(provider.api, id, (a) => a.state === 'ended')).end_reason).to.include('done');
    await waitAgreementOutbox(consumer, id);
  });

  it('serves the JSON-LD context of the AgreementTerminationMessage', async () => {
    const res = await fetch(`${provider.connector.url}/contexts/agreements-v1.jsonld`);
    expect(res.status).to.equal(200);
    expect(res.headers.get('content-type')).to.include('application/ld+json');
    const body = (await res.json()) as { '@context': Record<string, unknown> };
    expect(body['@context']).to.include({
      '@protected': true,
      pla: 'https://w3id.org/building-data/agreements/v1#',
      AgreementTerminationMessage: 'pla:AgreementTerminationMessage',
    });
  });

  it('ends an agreement from the provider: the consumer learns it and its transfers end', async () => {
    const id = await agreement();
    const { c, p } = await runningTransfer(id);
    const ended = await provider.api.post(`/api/v1/agreements/${encodeURIComponent(id)}/terminate`, {});
    expect(ended.status, JSON.stringify(ended.body)).to.equal(200);
    expect(ended.body).to.include({ state: 'ended', ended_by: 'provider' });
    expect(ended.body.transfers).to.deep.equal([p.id]);
    await waitTransfer(provider.api, p.id, (t) => t.state === 'TERMINATED');
    const seen = await waitTransfer(consumer.api, c.id, (t) => t.state === 'TERMINATED');
    expect(seen.error).to.include('ended by the provider');
    const ours = await waitAgreement(consumer.api, id, (a) => a.state === 'ended');
    expect(ours.ended_by).to.equal('provider');
    expectError(await consumer.api.post('/api/v1/transfers', { agreement_id: id }), 409, 'conflict');
    await waitAgreementOutbox(provider, id);
  });

  it('ends an agreement once when ends cross: both operators at the same moment, and two operators on one side', async () => {
    const id = await agreement();
    const { c, p } = await runningTransfer(id);
    const path = `/api/v1/agreements/${encodeURIComponent(id)}/terminate`;
    const second = await consumer.api.post('/api/v1/api-keys', { name: 'second operator', role: 'admin' });
    expect(second.status, JSON.stringify(second.body)).to.equal(201);
    const secondOperator = client(consumer.connector.url, second.body.key as string);
    // The consumer's two operators and the provider's at once: the consumer's workflow gets two
    // ends of ours and, crossing them, the provider's message.
    const answers = await Promise.all([
      consumer.api.post(path, { reason: 'first operator' }),
      secondOperator.post(path, { reason: 'second operator' }),
      provider.api.post(path, { reason: 'provider operator' }),
    ]);
    // Either the end (200) or, once it is recorded, "already ended" (409): nothing else. On this
    // machine all three answer 200 (both of the consumer's pass the API's check before either end
    // is recorded): the crossing in the workflow that used to hang.
    for (const a of answers) {
      expect([200, 409], JSON.stringify(a.body)).to.include(a.status);
      if (a.status === 409) expectError(a, 409, 'conflict', 'ended');
    }
    const [mine, other] = answers.slice(0, 2);
    if (mine!.status === 200 && other!.status === 200) expect(other!.body).to.deep.equal(mine!.body);
    const ours = await waitAgreement(consumer.api, id, (a) => a.state === 'ended');
    const theirs = await waitAgreement(provider.api, id, (a) => a.state === 'ended');
    // Every end that answered 200 says how the agreement ended on its side.
    for (const a of answers.slice(0, 2))
      if (a.status === 200) expect(a.body.ended_by).to.equal(ours.ended_by);
    const [, , providers] = answers;
    if (providers.status === 200) expect(providers.body.ended_by).to.equal(theirs.ended_by);
    await waitTransfer(consumer.api, c.id, (t) => t.state === 'TERMINATED');
    await waitTransfer(provider.api, p.id, (t) => t.state === 'TERMINATED');
    // Each side's end is one evidence entry, and its termination workflow finishes.
    const digest = createHash('sha256').update(id).digest('hex').slice(0, 32);
    for (const [role, side] of [
      ['consumer', consumer],
      ['provider', provider],
    ] as const) {
      const entries = await side.connector.db('evidence').where({ kind: 'agreement.ended', process_id: id });
      expect(entries, role).to.have.length(1);
      const handle = side.connector.temporal.workflow.getHandle(`agreement-termination/${role}/${digest}`);
      const deadline = Date.now() + 15_000;
      let status = (await handle.describe()).status.name;
      while (status === 'RUNNING' && Date.now() < deadline) {
        await new Promise((r) => setTimeout(r, 50));
        status = (await handle.describe()).status.name;
      }
      expect(status, role).to.equal('COMPLETED');
    }
  });

  /** Polls an agreement until `done` holds. */
  async function waitAgreement(api: Client, id: string, done: (a: Json) => boolean): Promise<Json> {
    const deadline = Date.now() + 15_000;
    for (;;) {
      const res = await api.get(`/api/v1/agreements/${encodeURIComponent(id)}`);
      if (res.status === 200 && done(res.body)) return res.body;
      if (Date.now() > deadline)
        throw new Error(`agreement ${id} did not get there: ${JSON.stringify(res.body)}`);
      await new Promise((r) => setTimeout(r, 25));
    }
  }

  /** Our AgreementTerminationMessage was delivered (outbox row of the agreement). */
  async function waitAgreementOutbox(side: Participant, id: string) {
    const deadline = Date.now() + 15_000;
    for (;;) {
      const row = await side.connector.db('outbox').where({ process_id: id, kind: 'agreement' }).first();
      if (row?.status === 'delivered') {
        expect(row).to.include({ message_type: 'AgreementTerminationMessage' });
        expect(row.evidence_id).to.match(/^ev_/);
        return;
      }
      if (Date.now() > deadline)
        throw new Error(`the termination of ${id} was not delivered: ${JSON.stringify(row)}`);
      await new Promise((r) => setTimeout(r, 25));
    }
  }

  it('hands a long-running transfer to a fresh workflow run: state, renewals and actions carry on', async () => {
    // A consumer whose transfer workflows continue as new after a few dozen events.
    const long = await startParticipant('long-running', authority, { TRANSFER_HISTORY_LIMIT: '40' });
    try {
      const negotiated = await long.api.post('/api/v1/negotiations', {
        counterparty_address: provider.dsp,
        counterparty_did: provider.did,
        offer_id: 'transfer-offer',
        dataset_id: 'product-transfer-offer',
      });
      expect(negotiated.status, JSON.stringify(negotiated.body)).to.equal(201);
      const id = (await waitFor(long.api, negotiated.body.id, (n) => n.state === 'FINALIZED')).agreement_id;
      await waitAgreement(long.api, id, (a) => a.state === 'active');
      await waitAgreement(provider.api, id, (a) => a.state === 'active');
      const started = await long.api.post('/api/v1/transfers', { agreement_id: id });
      expect(started.status, JSON.stringify(started.body)).to.equal(201);
      const c = await waitTransfer(long.api, started.body.id, (t) => t.state === 'STARTED' && t.data_address);
      const row = await long.connector.db('transfers').where({ id: c.id }).first('workflow_id');
      const handle = long.connector.temporal.workflow.getHandle(row.workflow_id);

      // Two renewals (the provider's tokens live 9 s): the history passes its limit meanwhile.
      const renewed = await waitTransfer(
        long.api,
        c.id,
        (t) =>
          t.history.filter((h: { note: string | null }) => h.note === 'data address renewed').length >= 2,
        40_000,
      );
      const history = await handle.fetchHistory();
      const opened = history.events![0]!.workflowExecutionStartedEventAttributes!;
      expect(opened.continuedExecutionRunId, 'the workflow continued as new').to.be.a('string').and.not.empty;
      expect(history.events!.length).to.be.below(80);
      // The same process: its state, pids, history and a working token.
      expect(renewed).to.include({ state: 'STARTED', flow_state: 'ready', provider_pid: c.provider_pid });
      const versions = (
        await long.connector.db('transfer_history').where({ transfer_id: c.id }).select('version')
      ).map((h: { version: number }) => h.version);
      expect(versions).to.deep.equal([...versions].sort((a, b) => a - b));
      expect(new Set(versions).size).to.equal(versions.length);
      const address = (await storedAddressOf(long, c.id))!;
      expect(await verifyTransferToken(provider.connector.db, token(address))).to.include({
        transferId: c.provider_pid,
      });

      // Operator actions and the provider's messages reach the new run.
      const suspended = await act(long, c.id, 'suspend');
      expect(suspended.status, JSON.stringify(suspended.body)).to.equal(200);
      expect(suspended.body).to.include({ state: 'SUSPENDED', data_address: null });
      await waitTransfer(provider.api, c.provider_pid, (t) => t.state === 'SUSPENDED');
      expect((await act(provider, c.provider_pid, 'resume')).body.state).to.equal('STARTED');
      await waitTransfer(long.api, c.id, (t) => t.state === 'STARTED' && t.flow_state === 'ready');
      expect((await act(long, c.id, 'terminate')).body.state).to.equal('TERMINATED');
      await waitTransfer(provider.api, c.provider_pid, (t) => t.state === 'TERMINATED');
      // The last run, which began from what the one before handed over, for the replay suite.
      await handle.result();
      await recordHistory(long.connector, row.workflow_id, 'transfer-consumer-continued');
    } finally {
      await long.connector.stop();
    }
  });

  /** A consumer's stored (unmasked) data address. */
  async function storedAddressOf(side: Participant, id: string): Promise<DataAddress | null> {
    const row = await side.connector.db('transfers').where({ id }).first('data_address');
    return row.data_address as DataAddress | null;
  }

  it('keeps a request REQUESTED while the provider is away; only terminate is possible then', async () => {
    const port = new URL(provider.connector.url).port;
    await provider.connector.stop();
    try {
      const started = await consumer.api.post('/api/v1/transfers', { agreement_id: agreementId });
      expect(started.status, JSON.stringify(started.body)).to.equal(201);
      expect(started.body.state).to.equal('REQUESTED');
      for (const action of ['suspend', 'resume', 'complete'])
        expectError(await act(consumer, started.body.id, action), 409, 'conflict', 'requested');
      const terminated = await act(consumer, started.body.id, 'terminate');
      expect(terminated.body).to.include({ state: 'TERMINATED' });
    } finally {
      const again = await startTestConnector({
        name: 'provider',
        restartOf: provider.connector,
        env: {
          PORT: port,
          PUBLIC_URL: `http://127.0.0.1:${port}`,
          DID_WEB_ALLOW_HTTP: 'true',
          AUTHORITY_URL: authority.url,
        },
      });
      provider = { ...provider, connector: again, api: client(again.url, again.adminKey) };
    }
  });
});
