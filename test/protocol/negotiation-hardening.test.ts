/**
 * The negotiation against a counterparty that does not behave like ours: a scripted peer (a
 * real HTTP server speaking DSP with a member's real connector tokens) sends what our own
 * connector never would (a wrong agreement, another pid, repeats in flight, silence), and
 * receives what our connector sends it. Our connectors run as in production.
 */
import { expect } from 'chai';
import http from 'node:http';
import { randomUUID } from 'node:crypto';
import { MockActivityEnvironment } from '@temporalio/testing';
import { client } from '../support/http.js';
import { expectError } from '../support/expect-error.js';
import { replayNegotiations } from '../support/histories.js';
import {
  publishOffer,
  startDataspace,
  startParticipant,
  waitFor,
  type Participant,
} from '../support/dataspace.js';
import type { RunningAuthority } from '../../dev/authority/index.js';
import type { RunningBuildingBackend } from '../../dev/building-backend/index.js';
import { freePort } from '../../dev/processes.js';
import { callbackAddressProblem } from '../../domain/dsp.js';
import { PL_POLICY_NAMESPACE } from '../../domain/policy.js';
import { createOutboxActivities } from '../../activities/outbox.js';
import { outboxStore } from '../../db/outbox.js';

const DSP = 'https://w3id.org/dspace/2025/1/context.jsonld';
const CONTEXT = [DSP];

interface Received {
  method: string;
  path: string;
  body: Record<string, unknown>;
}

/**
 * A counterparty on loopback: records every call and answers with `answer` (by default 201
 * with a ContractNegotiation for an initial request, else 200).
 */
async function startScriptedPeer() {
  const received: Received[] = [];
  const state: {
    answer: (r: Received) => { status: number; body?: unknown } | Promise<{ status: number; body?: unknown }>;
  } = {
    answer: (r) =>
      r.path.endsWith('/negotiations/request')
        ? {
            status: 201,
            body: {
              '@context': CONTEXT,
              '@type': 'ContractNegotiation',
              providerPid: `urn:uuid:${randomUUID()}`,
              consumerPid: r.body.consumerPid,
              state: 'REQUESTED',
            },
          }
        : { status: 200 },
  };
  const server = http.createServer((req, res) => {
    let text = '';
    req.on('data', (c: Buffer) => (text += c.toString()));
    req.on('end', () => {
      const r: Received = { method: req.method!, path: req.url!, body: text ? JSON.parse(text) : {} };
      received.push(r);
      void Promise.resolve(state.answer(r)).then(({ status, body }) => {
        res.writeHead(status, { 'content-type': 'application/json' });
        res.end(body === undefined ? '' : JSON.stringify(body));
      });
    });
  });
  const port = await freePort();
  await new Promise<void>((resolve) => server.listen(port, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${port}/dsp`,
    received,
    state,
    /** The calls received so far whose path ends with `suffix`. */
    calls: (suffix: string) => received.filter((r) => r.path.endsWith(suffix)),
    async waitForCall(suffix: string, ms = 15_000): Promise<Received> {
      const deadline = Date.now() + ms;
      for (;;) {
        const found = received.find((r) => r.path.endsWith(suffix));
        if (found) return found;
        if (Date.now() > deadline) throw new Error(`no call to …${suffix}: ${JSON.stringify(received)}`);
        await new Promise((r) => setTimeout(r, 20));
      }
    },
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}
type ScriptedPeer = Awaited<ReturnType<typeof startScriptedPeer>>;

describe('contract negotiation against a scripted counterparty (hardening)', function () {
  this.timeout(120_000);
  let authority: RunningAuthority;
  let backend: RunningBuildingBackend;
  let provider: Participant;
  let consumer: Participant;
  let peer: ScriptedPeer;

  before(async () => {
    ({ authority, backend } = await startDataspace());
    provider = await startParticipant('provider', authority, {
      APPROVAL_DEADLINE: 'PT30S',
      NEGOTIATION_DEADLINE: 'PT8S',
    });
    consumer = await startParticipant('consumer', authority, {
      APPROVAL_DEADLINE: 'PT8S',
      NEGOTIATION_DEADLINE: 'PT8S',
    });
    await publishOffer(provider, backend, 'automatic', 'auto');
    await publishOffer(provider, backend, 'manual', 'manual');
  });
  beforeEach(async () => {
    peer = await startScriptedPeer();
  });
  afterEach(async () => {
    await peer?.close();
  });
  after(async () => {
    await consumer?.connector.stop();
    await provider?.connector.stop();
    await backend?.close();
    await authority?.close();
  });

  /** Speaks as `from` to `to`'s DSP endpoints, with `from`'s real connector token. */
  const dspAs = (from: Participant, to: Participant) => {
    const dsp = client(to.dsp);
    const auth = async () => ({
      authorization: `Bearer ${await from.connector.identity.issueToken(to.did)}`,
    });
    return {
      post: async (path: string, body: unknown) => dsp.post(path, body, await auth()),
      get: async (path: string) => dsp.get(path, await auth()),
    };
  };
  /** The scripted provider (it speaks with the provider connector's identity) towards our consumer. */
  const asProvider = () => dspAs(provider, consumer);
  /** The scripted consumer (the consumer connector's identity) towards our provider. */
  const asConsumer = () => dspAs(consumer, provider);

  const RULES = { permission: [{ action: 'read' }] };

  /** Our consumer asks the scripted provider for dataset `ds-1` with an offer by value; REQUESTED. */
  async function consumerRequests(extra: Record<string, unknown> = {}) {
    const started = await consumer.api.post('/api/v1/negotiations', {
      counterparty_address: peer.url,
      counterparty_did: provider.did,
      offer: { '@id': 'offer-1', ...RULES },
      dataset_id: 'ds-1',
      ...extra,
    });
    expect(started.status, JSON.stringify(started.body)).to.equal(201);
    const request = await peer.waitForCall('/negotiations/request');
    const n = await waitFor(consumer.api, started.body.id, (x) => x.provider_pid !== null);
    return { id: started.body.id as string, providerPid: n.provider_pid as string, request };
  }

  const agreementMessage = (
    pids: { id: string; providerPid: string },
    agreement: Record<string, unknown> = {},
  ) => ({
    '@context': CONTEXT,
    '@id': `urn:uuid:${randomUUID()}`,
    '@type': 'ContractAgreementMessage',
    providerPid: pids.providerPid,
    consumerPid: pids.id,
    agreement: {
      '@id': `urn:uuid:${randomUUID()}`,
      '@type': 'Agreement',
      target: 'ds-1',
      assigner: provider.did,
      assignee: consumer.did,
      timestamp: new Date().toISOString(),
      ...RULES,
      ...agreement,
    },
  });

  /** A negotiation's DSP path below the base (pids are urn:uuid IRIs: safe in a path as they are). */
  const path = (id: string, suffix: string) => `/negotiations/${id}/${suffix}`;

  /** The scripted provider's FINALIZED event to our consumer. */
  const finalized = (n: { id: string; providerPid: string }) => ({
    '@context': CONTEXT,
    '@id': `urn:uuid:${randomUUID()}`,
    '@type': 'ContractNegotiationEventMessage',
    providerPid: n.providerPid,
    consumerPid: n.id,
    eventType: 'FINALIZED',
  });

  it('names our own JSON-LD context in messages with rules and serves it', async () => {
    const { request } = await consumerRequests();
    const contextUrl = `${consumer.connector.url}/contexts/building-data-v1.jsonld`;
    expect(request.body['@context']).to.deep.equal([DSP, contextUrl]);
    expect(request.body.offer).to.deep.include({ '@id': 'offer-1', '@type': 'Offer', target: 'ds-1' });
    const doc = await fetch(contextUrl);
    expect(doc.status).to.equal(200);
    expect(doc.headers.get('content-type')).to.include('application/ld+json');
    const body = (await doc.json()) as { '@context': Record<string, unknown> };
    expect(body['@context']).to.include({ '@protected': true, pl: PL_POLICY_NAMESPACE });
    // Our real provider names its own context in the agreement it sends.
    await publishOffer(provider, backend, 'automatic', 'ctx');
    const started = await consumer.api.post('/api/v1/negotiations', {
      counterparty_address: provider.dsp,
      counterparty_did: provider.did,
      offer_id: 'ctx',
      dataset_id: 'product-ctx',
    });
    const done = await waitFor(consumer.api, started.body.id, (n) => n.state === 'FINALIZED');
    const inbound = await consumer.connector
      .db('evidence')
      .where({ kind: 'dsp.inbound', process_id: done.id })
      .select('canonical');
    const messages = inbound.map(
      (e: { canonical: Buffer }) =>
        (JSON.parse(e.canonical.toString('utf8')) as { payload: { message: Record<string, unknown> } })
          .payload.message,
    );
    const agreement = messages.find((m) => m['@type'] === 'ContractAgreementMessage')!;
    expect(agreement['@context']).to.deep.equal([
      DSP,
      `${provider.connector.url}/contexts/building-data-v1.jsonld`,
    ]);
  });

  it('verifies an agreement: a wrong target, assignee, assigner or rules terminate, and the provider is told why', async () => {
    const wrong: Array<[Record<string, unknown>, string]> = [
      [{ target: 'ds-2' }, 'its target is ds-2, we asked for ds-1'],
      [{ assignee: 'did:web:example.com' }, 'its assignee is did:web:example.com'],
      [{ assigner: 'did:web:example.com' }, 'its assigner is did:web:example.com'],
      [{ permission: [{ action: 'write' }] }, 'its rules differ from those of offer offer-1'],
    ];
    for (const [change, reason] of wrong) {
      peer.received.length = 0;
      const n = await consumerRequests();
      const res = await asProvider().post(path(n.id, 'agreement'), agreementMessage(n, change));
      expect(res.status, JSON.stringify(res.body)).to.equal(200);
      const ended = await waitFor(consumer.api, n.id, (x) => x.state === 'TERMINATED');
      expect(ended.error).to.include('the agreement does not match the offer').and.include(reason);
      const told = await peer.waitForCall(path(n.providerPid, 'termination'));
      expect(told.body).to.include({
        '@type': 'ContractNegotiationTerminationMessage',
        providerPid: n.providerPid,
        consumerPid: n.id,
        code: 'agreement_mismatch',
      });
      expect((told.body.reason as string[])[0]).to.include(reason);
      expect(peer.calls('/agreement/verification')).to.deep.equal([]);
      expect(
        (await consumer.api.get('/api/v1/agreements?limit=200')).body.items.map(
          (a: { negotiation_id: string }) => a.negotiation_id,
        ),
      ).not.to.include(n.id);
    }
  });

  it('verifies a matching agreement (rules in another key order, empty constraint lists) and stores it when FINALIZED', async () => {
    const n = await consumerRequests();
    const message = agreementMessage(n, {
      permission: [{ constraint: [], action: 'read' }],
      prohibition: [],
    });
    expect((await asProvider().post(path(n.id, 'agreement'), message)).status).to.equal(200);
    const verification = await peer.waitForCall(path(n.providerPid, 'agreement/verification'));
    expect(verification.body).to.include({ providerPid: n.providerPid, consumerPid: n.id });
    await waitFor(consumer.api, n.id, (x) => x.state === 'VERIFIED');
    expect((await asProvider().post(path(n.id, 'events'), finalized(n))).status).to.equal(200);
    const done = await waitFor(consumer.api, n.id, (x) => x.state === 'FINALIZED');
    const agreementId = (message.agreement as { '@id': string })['@id'];
    expect(done.agreement_id).to.equal(agreementId);
    const stored = await consumer.api.get(`/api/v1/agreements/${encodeURIComponent(agreementId)}`);
    expect(stored.status).to.equal(200);
    expect(stored.body).to.include({ negotiation_id: n.id, dataset_id: 'ds-1', provider_did: provider.did });
  });

  it('refuses an agreement with an unparseable timestamp (400) and one whose @id another negotiation has', async () => {
    const n = await consumerRequests();
    for (const timestamp of ['yesterday', '2025-02-31T10:00:00Z', '2025-01-01 10:00:00']) {
      const res = await asProvider().post(path(n.id, 'agreement'), agreementMessage(n, { timestamp }));
      expect(res.status, timestamp).to.equal(400);
      expect(res.body).to.include({ '@type': 'ContractNegotiationError', code: 'invalid_message' });
      expect(res.body.reason[0]).to.include('timestamp');
    }
    const other = (await consumer.api.get('/api/v1/agreements?limit=200')).body.items[0];
    expect(other, 'an agreement from an earlier test').to.be.an('object');
    const taken = await asProvider().post(path(n.id, 'agreement'), agreementMessage(n, { '@id': other.id }));
    expect(taken.status).to.equal(400);
    expect(taken.body).to.include({ code: 'invalid_message', providerPid: n.providerPid, consumerPid: n.id });
    expect(taken.body.reason[0]).to.equal(`agreement ${other.id} exists already`);
    // Nothing moved: the negotiation still waits for a (good) agreement, without a timezone it is UTC.
    const still = await consumer.api.get(`/api/v1/negotiations/${encodeURIComponent(n.id)}`);
    expect(still.body.state).to.equal('REQUESTED');
    const good = agreementMessage(n, { timestamp: '2025-01-31T10:00:00' });
    expect((await asProvider().post(path(n.id, 'agreement'), good)).status).to.equal(200);
    await peer.waitForCall('/agreement/verification');
    expect((await asProvider().post(path(n.id, 'events'), finalized(n))).status).to.equal(200);
    await waitFor(consumer.api, n.id, (x) => x.state === 'FINALIZED');
    const stored = await consumer.api.get(
      `/api/v1/agreements/${encodeURIComponent((good.agreement as { '@id': string })['@id'])}`,
    );
    expect(stored.body.signed_at).to.equal('2025-01-31T10:00:00.000Z');
  });

  it('answers repeats that arrive while the first is still handled the same, with no second effect', async () => {
    const n = await consumerRequests();
    const message = agreementMessage(n);
    const answers = await Promise.all(
      [1, 2, 3].map(() => asProvider().post(path(n.id, 'agreement'), message)),
    );
    for (const a of answers) expect(a.status, JSON.stringify(a.body)).to.equal(200);
    expect(answers[1]!.body).to.deep.equal(answers[0]!.body);
    expect(answers[2]!.body).to.deep.equal(answers[0]!.body);
    await peer.waitForCall('/agreement/verification');
    const read = await waitFor(consumer.api, n.id, (x) => x.state === 'VERIFIED');
    expect(
      read.history.filter((h: { message_type: string }) => h.message_type === 'ContractAgreementMessage'),
    ).to.have.length(1);
    expect(peer.calls('/agreement/verification')).to.have.length(1);

    // The same with initial requests to our provider, sent together.
    const consumerPid = `urn:uuid:${randomUUID()}`;
    const request = {
      '@context': CONTEXT,
      '@id': `urn:uuid:${randomUUID()}`,
      '@type': 'ContractRequestMessage',
      consumerPid,
      callbackAddress: peer.url,
      offer: { '@id': 'manual', '@type': 'Offer', target: 'product-manual' },
    };
    const firsts = await Promise.all(
      [1, 2, 3].map(() => asConsumer().post('/negotiations/request', request)),
    );
    for (const a of firsts) {
      expect(a.status, JSON.stringify(a.body)).to.equal(201);
      expect(a.body).to.deep.equal(firsts[0]!.body);
    }
    const theirs = await waitFor(provider.api, firsts[0]!.body.providerPid, (x) => x.approval === 'pending');
    expect(
      theirs.history.filter((h: { message_type: string }) => h.message_type === 'ContractRequestMessage'),
    ).to.have.length(1);
  });

  it('refuses another initial request for a running negotiation, and a consumerPid reused after the end (400, not 500)', async () => {
    const consumerPid = `urn:uuid:${randomUUID()}`;
    const request = (id?: string) => ({
      '@context': CONTEXT,
      ...(id ? { '@id': id } : {}),
      '@type': 'ContractRequestMessage',
      consumerPid,
      callbackAddress: peer.url,
      offer: { '@id': 'manual', '@type': 'Offer' },
    });
    const first = await asConsumer().post('/negotiations/request', request(`urn:uuid:${randomUUID()}`));
    expect(first.status).to.equal(201);
    const providerPid = first.body.providerPid as string;
    for (const again of [request(`urn:uuid:${randomUUID()}`), request()]) {
      const res = await asConsumer().post('/negotiations/request', again);
      expect(res.status, JSON.stringify(res.body)).to.equal(400);
      expect(res.body).to.include({
        '@type': 'ContractNegotiationError',
        code: 'invalid_transition',
        providerPid,
        consumerPid,
      });
      expect(res.body.reason[0]).to.include('exists already');
    }
    const ended = await asConsumer().post(path(providerPid, 'termination'), {
      '@context': CONTEXT,
      '@type': 'ContractNegotiationTerminationMessage',
      providerPid,
      consumerPid,
      code: 'done',
    });
    expect(ended.status).to.equal(200);
    const row = await provider.connector.db('negotiations').where({ id: providerPid }).first('workflow_id');
    await provider.connector.temporal.workflow.getHandle(row.workflow_id).result();
    const reused = await asConsumer().post('/negotiations/request', request(`urn:uuid:${randomUUID()}`));
    expect(reused.status, JSON.stringify(reused.body)).to.equal(400);
    expect(reused.body).to.include({ '@type': 'ContractNegotiationError', code: 'invalid_transition' });
    expect(reused.body.reason[0]).to.include('has ended');
  });

  it('refuses a message naming another process of the counterparty than the one we know (pid_mismatch)', async () => {
    const n = await consumerRequests();
    const wrong = agreementMessage({ id: n.id, providerPid: `urn:uuid:${randomUUID()}` });
    const res = await asProvider().post(path(n.id, 'agreement'), wrong);
    expect(res.status).to.equal(400);
    expect(res.body).to.include({ '@type': 'ContractNegotiationError', code: 'pid_mismatch' });
    expect(res.body.reason[0]).to.include(n.providerPid);

    const consumerPid = `urn:uuid:${randomUUID()}`;
    const created = await asConsumer().post('/negotiations/request', {
      '@context': CONTEXT,
      '@type': 'ContractRequestMessage',
      consumerPid,
      callbackAddress: peer.url,
      offer: { '@id': 'manual' },
    });
    const providerPid = created.body.providerPid as string;
    const other = await asConsumer().post(path(providerPid, 'termination'), {
      '@context': CONTEXT,
      '@type': 'ContractNegotiationTerminationMessage',
      providerPid,
      consumerPid: `urn:uuid:${randomUUID()}`,
    });
    expect(other.status).to.equal(400);
    expect(other.body).to.include({ code: 'pid_mismatch', providerPid, consumerPid });
    const still = await provider.api.get(`/api/v1/negotiations/${encodeURIComponent(providerPid)}`);
    expect(still.body.state).to.equal('REQUESTED');
  });

  it('checks counter-requests against the offers of the negotiation; other rules wait for an operator', async () => {
    const consumerPid = `urn:uuid:${randomUUID()}`;
    const created = await asConsumer().post('/negotiations/request', {
      '@context': CONTEXT,
      '@type': 'ContractRequestMessage',
      consumerPid,
      callbackAddress: peer.url,
      offer: { '@id': 'manual', '@type': 'Offer', target: 'product-manual' },
    });
    const providerPid = created.body.providerPid as string;
    await waitFor(provider.api, providerPid, (x) => x.approval === 'pending');
    const counter = {
      '@id': 'counter-1',
      permission: [
        {
          action: 'read',
          constraint: [{ leftOperand: 'odrl:purpose', operator: 'eq', rightOperand: 'research' }],
        },
      ],
    };
    const countered = await provider.api.post(
      `/api/v1/negotiations/${encodeURIComponent(providerPid)}/counter-offer`,
      { offer: counter },
    );
    expect(countered.status).to.equal(200);
    const offered = await peer.waitForCall(path(consumerPid, 'offers'));
    expect(offered.body.offer).to.deep.include({ '@id': 'counter-1', target: 'product-manual' });
    const counterRequest = (offer: Record<string, unknown>) => ({
      '@context': CONTEXT,
      '@id': `urn:uuid:${randomUUID()}`,
      '@type': 'ContractRequestMessage',
      providerPid,
      consumerPid,
      offer: { '@type': 'Offer', ...offer },
    });
    const unknown = await asConsumer().post(path(providerPid, 'request'), counterRequest({ '@id': 'nope' }));
    expect(unknown.status).to.equal(400);
    expect(unknown.body).to.include({ code: 'unknown_offer' });
    expect(unknown.body.reason[0]).to.include('not part of this negotiation');
    const otherTarget = await asConsumer().post(
      path(providerPid, 'request'),
      counterRequest({ '@id': 'counter-1', target: 'product-auto' }),
    );
    expect(otherTarget.status).to.equal(400);
    expect(otherTarget.body.reason[0]).to.include('not the dataset of this negotiation');
    const proposal = { '@id': 'counter-1', permission: [{ action: 'write' }] };
    const proposed = await asConsumer().post(path(providerPid, 'request'), counterRequest(proposal));
    expect(proposed.status, JSON.stringify(proposed.body)).to.equal(200);
    expect(proposed.body.state).to.equal('REQUESTED');
    const pending = await waitFor(provider.api, providerPid, (x) => x.approval === 'pending');
    expect(pending.offer.permission).to.deep.equal([{ action: 'write' }]);

    // An automatic offer asked for with other rules is not agreed automatically either.
    const autoPid = `urn:uuid:${randomUUID()}`;
    const asked = await asConsumer().post('/negotiations/request', {
      '@context': CONTEXT,
      '@type': 'ContractRequestMessage',
      consumerPid: autoPid,
      callbackAddress: peer.url,
      offer: { '@id': 'auto', '@type': 'Offer', permission: [{ action: 'write' }] },
    });
    expect(asked.status).to.equal(201);
    const waiting = await waitFor(provider.api, asked.body.providerPid, (x) => x.approval === 'pending');
    expect(waiting.state).to.equal('REQUESTED');
    // The same rules as the offer's (by value) go through without anyone.
    const samePid = `urn:uuid:${randomUUID()}`;
    const same = await asConsumer().post('/negotiations/request', {
      '@context': CONTEXT,
      '@type': 'ContractRequestMessage',
      consumerPid: samePid,
      callbackAddress: peer.url,
      offer: {
        '@id': 'auto',
        '@type': 'Offer',
        permission: [{ action: 'read', constraint: [] }],
        prohibition: [],
      },
    });
    await waitFor(provider.api, same.body.providerPid, (x) => x.state === 'AGREED');
  });

  it('refuses a callbackAddress off the caller’s host, with credentials or a query, or not https (400 invalid_callback)', async () => {
    for (const [callbackAddress, reason] of [
      ['https://example.com/dsp', "not on the caller's host"],
      ['http://10.1.2.3/dsp', 'https'],
      [`http://user:pw@127.0.0.1:1/dsp`, 'credentials'],
      [`http://127.0.0.1:1/dsp?x=1`, 'query'],
    ]) {
      const res = await asConsumer().post('/negotiations/request', {
        '@context': CONTEXT,
        '@type': 'ContractRequestMessage',
        consumerPid: `urn:uuid:${randomUUID()}`,
        callbackAddress,
        offer: { '@id': 'auto' },
      });
      expect(res.status, callbackAddress).to.equal(400);
      expect(res.body).to.include({ '@type': 'ContractNegotiationError', code: 'invalid_callback' });
      expect(res.body.reason[0]).to.include(reason!);
    }
    // Without the loopback allowance (DID_WEB_ALLOW_HTTP), loopback and private addresses are refused
    // (checked directly: such a connector cannot authenticate a loopback peer in the first place).
    const did = 'did:web:connector.example.com';
    expect(callbackAddressProblem('http://127.0.0.1:8080/dsp', 'did:web:127.0.0.1%3A8080', false)).to.include(
      'loopback',
    );
    expect(callbackAddressProblem('https://localhost/dsp', 'did:web:localhost', false)).to.include(
      'loopback',
    );
    expect(callbackAddressProblem('https://dsp.connector.example.com/x', did, false)).to.equal(null);
    expect(callbackAddressProblem('https://connector.example.com:8443/dsp', did, false)).to.equal(null);
    expect(callbackAddressProblem('https://evil.example.com/dsp', did, false)).to.include("caller's host");
    expect(
      callbackAddressProblem('https://example.com.evil.net/dsp', 'did:web:example.com', false),
    ).to.include("caller's host");
  });

  it('tells the counterparty when its refusal ends the negotiation (a termination follows)', async () => {
    peer.state.answer = (r) =>
      r.path.endsWith('/agreement')
        ? { status: 400, body: { '@type': 'ContractNegotiationError', code: 'nope' } }
        : { status: 200 };
    const consumerPid = `urn:uuid:${randomUUID()}`;
    const created = await asConsumer().post('/negotiations/request', {
      '@context': CONTEXT,
      '@type': 'ContractRequestMessage',
      consumerPid,
      callbackAddress: peer.url,
      offer: { '@id': 'auto', '@type': 'Offer' },
    });
    const providerPid = created.body.providerPid as string;
    const ended = await waitFor(provider.api, providerPid, (x) => x.state === 'TERMINATED');
    expect(ended.error).to.include('answered 400');
    const told = await peer.waitForCall(path(consumerPid, 'termination'));
    expect(told.body).to.include({ providerPid, consumerPid, code: 'delivery_failed' });
  });

  it('keeps the providerPid of a delivered request for a delivery that runs again', async () => {
    const n = await consumerRequests();
    const row = await consumer.connector
      .db('outbox')
      .where({ process_id: n.id, message_type: 'ContractRequestMessage' })
      .first('id');
    // The delivery activity run once more on the delivered row (as after a lost completion).
    const activities = createOutboxActivities({ db: consumer.connector.db });
    const policy = { initialIntervalMs: 100, maxIntervalMs: 100, maxAttempts: 1 };
    const again: { status: number; body: unknown } = await new MockActivityEnvironment().run(
      (id: number) => activities.deliverOutboxMessage(id, policy),
      row.id as number,
    );
    expect(again.status).to.equal(201);
    expect(again.body).to.deep.include({ providerPid: n.providerPid, consumerPid: n.id });
    expect(peer.calls('/negotiations/request')).to.have.length(1);
    expect((await outboxStore(consumer.connector.db).get(row.id))!.status).to.equal('delivered');
  });

  it('does not send to negotiations//…: a termination before the provider named its process stays here', async () => {
    peer.state.answer = (r) =>
      r.path.endsWith('/negotiations/request') ? { status: 201, body: {} } : { status: 200 };
    const started = await consumer.api.post('/api/v1/negotiations', {
      counterparty_address: peer.url,
      counterparty_did: provider.did,
      offer_id: 'offer-1',
      dataset_id: 'ds-1',
    });
    await peer.waitForCall('/negotiations/request');
    await waitFor(consumer.api, started.body.id, (x) =>
      x.history.some((h: { direction: string }) => h.direction === 'outbound'),
    );
    const terminated = await consumer.api.post(
      `/api/v1/negotiations/${encodeURIComponent(started.body.id)}/terminate`,
    );
    expect(terminated.status).to.equal(200);
    const done = await waitFor(consumer.api, started.body.id, (x) =>
      x.history.some((h: { note: string | null }) => h.note?.includes('termination was not sent')),
    );
    expect(done.state).to.equal('TERMINATED');
    expect(peer.received.filter((r) => r.path.includes('//'))).to.deep.equal([]);
  });

  it('ends a negotiation whose counterparty stays silent past NEGOTIATION_DEADLINE, and tells it', async () => {
    // Consumer in REQUESTED: the provider acknowledges and then says nothing.
    const n = await consumerRequests();
    const ended = await waitFor(consumer.api, n.id, (x) => x.state === 'TERMINATED', 30_000);
    expect(ended.error).to.include('did not answer').and.include('REQUESTED');
    const told = await peer.waitForCall(path(n.providerPid, 'termination'));
    expect(told.body).to.include({ code: 'timeout' });

    // Provider in OFFERED: the consumer never answers the counter-offer.
    const consumerPid = `urn:uuid:${randomUUID()}`;
    const created = await asConsumer().post('/negotiations/request', {
      '@context': CONTEXT,
      '@type': 'ContractRequestMessage',
      consumerPid,
      callbackAddress: peer.url,
      offer: { '@id': 'manual' },
    });
    const providerPid = created.body.providerPid as string;
    await waitFor(provider.api, providerPid, (x) => x.approval === 'pending');
    await provider.api.post(`/api/v1/negotiations/${encodeURIComponent(providerPid)}/counter-offer`, {
      offer: { '@id': 'counter-2', permission: [{ action: 'read' }] },
    });
    const silent = await waitFor(provider.api, providerPid, (x) => x.state === 'TERMINATED', 30_000);
    expect(silent.error).to.include('did not answer').and.include('OFFERED');
    expect((await peer.waitForCall(path(consumerPid, 'termination'))).body).to.include({ code: 'timeout' });
  });

  it('serves a provider-initiated offer: the operator accepts, and it finalizes', async () => {
    const providerPid = `urn:uuid:${randomUUID()}`;
    const offerMessage = {
      '@context': CONTEXT,
      '@id': `urn:uuid:${randomUUID()}`,
      '@type': 'ContractOfferMessage',
      providerPid,
      callbackAddress: peer.url,
      offer: { '@id': 'offer-9', '@type': 'Offer', target: 'ds-9', ...RULES },
    };
    const opened = await asProvider().post('/negotiations/offers', offerMessage);
    expect(opened.status, JSON.stringify(opened.body)).to.equal(201);
    expect(opened.body).to.include({ '@type': 'ContractNegotiation', providerPid, state: 'OFFERED' });
    const consumerPid = opened.body.consumerPid as string;
    expect(consumerPid).to.match(/^urn:uuid:/);
    const again = await asProvider().post('/negotiations/offers', offerMessage);
    expect(again.status).to.equal(201);
    expect(again.body).to.deep.equal(opened.body);
    const read = await asProvider().get(`/negotiations/${encodeURIComponent(consumerPid)}`);
    expect(read.body).to.deep.equal(opened.body);
    const pending = await waitFor(consumer.api, consumerPid, (x) => x.approval === 'pending');
    expect(pending).to.include({
      role: 'consumer',
      state: 'OFFERED',
      offer_id: 'offer-9',
      dataset_id: 'ds-9',
    });
    expect(pending.expires_at).to.be.a('string');
    expectError(
      await consumer.api.post(`/api/v1/negotiations/${encodeURIComponent(consumerPid)}/approve`),
      409,
      'conflict',
    );
    const accepted = await consumer.api.post(
      `/api/v1/negotiations/${encodeURIComponent(consumerPid)}/accept`,
    );
    expect(accepted.status, JSON.stringify(accepted.body)).to.equal(200);
    expect(accepted.body).to.include({ state: 'ACCEPTED', approval: 'accepted' });
    const event = await peer.waitForCall(path(providerPid, 'events'));
    expect(event.body).to.include({ eventType: 'ACCEPTED', providerPid, consumerPid });
    const n = { id: consumerPid, providerPid };
    const agreement = agreementMessage(n, { target: 'ds-9' });
    expect((await asProvider().post(path(consumerPid, 'agreement'), agreement)).status).to.equal(200);
    await peer.waitForCall(path(providerPid, 'agreement/verification'));
    expect((await asProvider().post(path(consumerPid, 'events'), finalized(n))).status).to.equal(200);
    await waitFor(consumer.api, consumerPid, (x) => x.state === 'FINALIZED');

    // An offer nobody accepts expires (APPROVAL_DEADLINE), and the provider is told.
    const lapsed = await asProvider().post('/negotiations/offers', {
      ...offerMessage,
      '@id': `urn:uuid:${randomUUID()}`,
      providerPid: `urn:uuid:${randomUUID()}`,
    });
    const expired = await waitFor(
      consumer.api,
      lapsed.body.consumerPid,
      (x) => x.approval === 'expired',
      30_000,
    );
    expect(expired.state).to.equal('TERMINATED');
    expect((await peer.waitForCall(path(lapsed.body.providerPid, 'termination'))).body).to.include({
      code: 'offer_expired',
    });
  });

  it('answers an offer with a counter-request (consumer) and checks the assigner against the participant id given', async () => {
    const n = await consumerRequests({ counterparty_participant_id: 'PROVIDER_X' });
    const counter = { '@id': 'offer-2', '@type': 'Offer', target: 'ds-1', permission: [{ action: 'use' }] };
    const offered = await asProvider().post(path(n.id, 'offers'), {
      '@context': CONTEXT,
      '@id': `urn:uuid:${randomUUID()}`,
      '@type': 'ContractOfferMessage',
      providerPid: n.providerPid,
      consumerPid: n.id,
      offer: counter,
    });
    expect(offered.status, JSON.stringify(offered.body)).to.equal(200);
    await waitFor(consumer.api, n.id, (x) => x.approval === 'pending' && x.state === 'OFFERED');
    const id = encodeURIComponent(n.id);
    expectError(
      await consumer.api.post(`/api/v1/negotiations/${id}/counter-request`, { offer: { '@id': 'x' } }),
      400,
      'invalid_request',
      'offer',
    );
    const mine = { '@id': 'offer-3', permission: [{ action: 'read' }] };
    const answered = await consumer.api.post(`/api/v1/negotiations/${id}/counter-request`, { offer: mine });
    expect(answered.status, JSON.stringify(answered.body)).to.equal(200);
    expect(answered.body).to.include({ state: 'REQUESTED', approval: 'countered' });
    const request = await peer.waitForCall(path(n.providerPid, 'request'));
    expect(request.body).to.include({ providerPid: n.providerPid, consumerPid: n.id });
    expect(request.body).not.to.have.property('callbackAddress');
    expect(request.body.offer).to.deep.equal({ ...mine, '@type': 'Offer', target: 'ds-1' });
    expectError(
      await consumer.api.post(`/api/v1/negotiations/${id}/counter-request`, { offer: mine }),
      409,
      'conflict',
    );
    // The agreement is signed by the participant id we were given, on the rules we asked for.
    const signed = agreementMessage(n, { assigner: 'PROVIDER_X', permission: [{ action: 'read' }] });
    expect((await asProvider().post(path(n.id, 'agreement'), signed)).status).to.equal(200);
    await peer.waitForCall('/agreement/verification');
    await waitFor(consumer.api, n.id, (x) => x.state === 'VERIFIED');
  });

  it('answers a termination that crosses ours the same (200) while ours is being delivered and after the end', async () => {
    // The provider takes its time to take our termination: our workflow is still delivering it.
    let release: () => void = () => {};
    const held = new Promise<void>((resolve) => (release = resolve));
    const usual = peer.state.answer;
    peer.state.answer = async (r) => {
      if (r.path.endsWith('/termination')) await held;
      return usual(r);
    };
    const n = await consumerRequests();
    expect(
      (await consumer.api.post(`/api/v1/negotiations/${encodeURIComponent(n.id)}/terminate`)).status,
    ).to.equal(200);
    await peer.waitForCall('/termination');
    const theirs = () => ({
      '@context': CONTEXT,
      '@id': `urn:uuid:${randomUUID()}`,
      '@type': 'ContractNegotiationTerminationMessage',
      providerPid: n.providerPid,
      consumerPid: n.id,
      code: 'bye',
    });
    const during = await asProvider().post(path(n.id, 'termination'), theirs());
    expect(during.status, JSON.stringify(during.body)).to.equal(200);
    expect(during.body).to.include({ state: 'TERMINATED', consumerPid: n.id });
    release();
    const row = await consumer.connector.db('negotiations').where({ id: n.id }).first('workflow_id');
    await consumer.connector.temporal.workflow.getHandle(row.workflow_id).result();
    const after = await asProvider().post(path(n.id, 'termination'), theirs());
    expect(after.status).to.equal(200);
    expect(after.body).to.deep.equal(during.body);
    // Anything else after the end is an illegal transition.
    const late = await asProvider().post(path(n.id, 'agreement'), agreementMessage(n));
    expect(late.status).to.equal(400);
    expect(late.body).to.include({ code: 'invalid_transition' });
  });

  it('terminates in AGREED (provider) and in VERIFIED (consumer), from either side', async () => {
    // Provider in AGREED: the consumer terminates instead of verifying.
    const consumerPid = `urn:uuid:${randomUUID()}`;
    const created = await asConsumer().post('/negotiations/request', {
      '@context': CONTEXT,
      '@type': 'ContractRequestMessage',
      consumerPid,
      callbackAddress: peer.url,
      offer: { '@id': 'auto' },
    });
    const providerPid = created.body.providerPid as string;
    await peer.waitForCall(path(consumerPid, 'agreement'));
    await waitFor(provider.api, providerPid, (x) => x.state === 'AGREED');
    const byConsumer = await asConsumer().post(path(providerPid, 'termination'), {
      '@context': CONTEXT,
      '@type': 'ContractNegotiationTerminationMessage',
      providerPid,
      consumerPid,
      code: 'changed_mind',
      reason: ['we changed our mind'],
    });
    expect(byConsumer.status).to.equal(200);
    expect(byConsumer.body.state).to.equal('TERMINATED');
    const p = await waitFor(provider.api, providerPid, (x) => x.state === 'TERMINATED');
    expect(p.error).to.equal('changed_mind: we changed our mind');
    expect(
      (await provider.api.get(`/api/v1/agreements?limit=200`)).body.items.some(
        (a: { negotiation_id: string }) => a.negotiation_id === providerPid,
      ),
    ).to.equal(false);

    // Provider in AGREED: its operator terminates; the consumer is told.
    const pid2 = `urn:uuid:${randomUUID()}`;
    const c2 = await asConsumer().post('/negotiations/request', {
      '@context': CONTEXT,
      '@type': 'ContractRequestMessage',
      consumerPid: pid2,
      callbackAddress: peer.url,
      offer: { '@id': 'auto' },
    });
    await waitFor(provider.api, c2.body.providerPid, (x) => x.state === 'AGREED');
    const byOperator = await provider.api.post(
      `/api/v1/negotiations/${encodeURIComponent(c2.body.providerPid)}/terminate`,
    );
    expect(byOperator.body).to.include({ state: 'TERMINATED', approval: null });
    expect((await peer.waitForCall(path(pid2, 'termination'))).body).to.include({ code: 'terminated' });

    // Consumer in VERIFIED: its operator terminates; the provider is told.
    const n = await consumerRequests();
    await asProvider().post(path(n.id, 'agreement'), agreementMessage(n));
    await waitFor(consumer.api, n.id, (x) => x.state === 'VERIFIED');
    const ours = await consumer.api.post(`/api/v1/negotiations/${encodeURIComponent(n.id)}/terminate`);
    expect(ours.body.state).to.equal('TERMINATED');
    expect((await peer.waitForCall(path(n.providerPid, 'termination'))).body).to.include({
      providerPid: n.providerPid,
      consumerPid: n.id,
      code: 'terminated',
    });

    // Consumer in VERIFIED: the provider terminates instead of finalizing.
    peer.received.length = 0;
    const m = await consumerRequests();
    await asProvider().post(path(m.id, 'agreement'), agreementMessage(m));
    await waitFor(consumer.api, m.id, (x) => x.state === 'VERIFIED');
    const byProvider = await asProvider().post(path(m.id, 'termination'), {
      '@context': CONTEXT,
      '@type': 'ContractNegotiationTerminationMessage',
      providerPid: m.providerPid,
      consumerPid: m.id,
      code: 'withdrawn',
    });
    expect(byProvider.status).to.equal(200);
    const c = await waitFor(consumer.api, m.id, (x) => x.state === 'TERMINATED');
    expect(c.error).to.equal('withdrawn');
    expect(c.agreement_id).to.be.a('string');
    expect(
      (await consumer.api.get(`/api/v1/agreements/${encodeURIComponent(c.agreement_id)}`)).status,
    ).to.equal(404);
  });

  it('renders reasons given as objects readably, from either side (TCK TerminationMessage)', async () => {
    // Our provider, terminated by the consumer with message objects and a language-tagged value.
    const consumerPid = `urn:uuid:${randomUUID()}`;
    const created = await asConsumer().post('/negotiations/request', {
      '@context': CONTEXT,
      '@type': 'ContractRequestMessage',
      consumerPid,
      callbackAddress: peer.url,
      offer: { '@id': 'manual' },
    });
    const providerPid = created.body.providerPid as string;
    await waitFor(provider.api, providerPid, (x) => x.approval === 'pending');
    const byConsumer = await asConsumer().post(path(providerPid, 'termination'), {
      '@context': CONTEXT,
      '@type': 'ContractNegotiationTerminationMessage',
      providerPid,
      consumerPid,
      code: 'withdrawn',
      reason: [{ message: 'budget cut' }, { '@value': 'budget geschrapt', '@language': 'nl' }],
    });
    expect(byConsumer.status).to.equal(200);
    const p = await waitFor(provider.api, providerPid, (x) => x.state === 'TERMINATED');
    expect(p.error).to.equal('withdrawn: budget cut; budget geschrapt');

    // Our consumer, terminated by the provider with objects that carry no message (shown as JSON),
    // including one whose keys would break a naive rendering.
    const n = await consumerRequests();
    const byProvider = await asProvider().post(path(n.id, 'termination'), {
      '@context': CONTEXT,
      '@type': 'ContractNegotiationTerminationMessage',
      providerPid: n.providerPid,
      consumerPid: n.id,
      reason: [{ toString: 1, detail: 'x' }, 7, 'plain'],
    });
    expect(byProvider.status).to.equal(200);
    const c = await waitFor(consumer.api, n.id, (x) => x.state === 'TERMINATED');
    expect(c.error).to.equal('{"toString":1,"detail":"x"}; 7; plain');
  });

  it('refuses at the HTTP edge what no workflow could take: deep nesting, NUL, oversized, non-text targets', async () => {
    const request = (extra: Record<string, unknown>) => ({
      '@context': CONTEXT,
      '@type': 'ContractRequestMessage',
      consumerPid: `urn:uuid:${randomUUID()}`,
      callbackAddress: peer.url,
      offer: { '@id': 'auto' },
      ...extra,
    });
    let deep: unknown = 'bottom';
    for (let i = 0; i < 40; i++) deep = [deep];
    const cases: Array<[Record<string, unknown>, string]> = [
      [request({ note: deep }), 'nested deeper than 32'],
      [request({ note: 'a\u0000b' }), 'NUL'],
      [request({ note: '\ud800' }), 'lone surrogate'],
      [request({ note: 'x'.repeat(300 * 1024) }), 'larger than 256 KiB'],
      [request({ offer: { '@id': 'auto', target: { toString: 1 } } }), 'target'],
      [request({ offer: { '@id': 'auto', narrowing: { objects: 'all' } } }), 'narrowing.objects'],
    ];
    for (const [body, why] of cases) {
      const res = await asConsumer().post('/negotiations/request', body);
      expect(res.status, why).to.equal(400);
      expect(res.body).to.include({ '@type': 'ContractNegotiationError', code: 'invalid_message' });
      expect(res.body.reason.join(' ')).to.include(why);
      const known = await provider.api.get('/api/v1/negotiations?role=provider&limit=200');
      expect(
        known.body.items.some((x: { consumer_pid: string }) => x.consumer_pid === body.consumerPid),
      ).to.equal(false);
    }
    // The same checks guard messages on a running negotiation.
    const n = await consumerRequests();
    const odd = await asProvider().post(path(n.id, 'termination'), {
      '@context': CONTEXT,
      '@type': 'ContractNegotiationTerminationMessage',
      providerPid: n.providerPid,
      consumerPid: n.id,
      reason: [deep],
    });
    expect(odd.status).to.equal(400);
    expect(odd.body).to.include({ code: 'invalid_message' });
    expect((await consumer.api.get(`/api/v1/negotiations/${encodeURIComponent(n.id)}`)).body.state).to.equal(
      'REQUESTED',
    );
  });

  // Every negotiation of this suite (both sides, finished or still running), replayed against the
  // current workflow code as a restarted worker would: repeats, races and decisions included.
  it('replays the history of every negotiation this suite ran, on both sides', async function () {
    this.timeout(120_000);
    const { count, failures } = await replayNegotiations([provider.connector, consumer.connector]);
    expect(count).to.be.greaterThan(10);
    expect(failures).to.deep.equal([]);
  });
});
