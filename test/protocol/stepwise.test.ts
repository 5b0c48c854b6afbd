/**
 * Operator holds at our own moves (approval `stepwise`), through two connectors over loopback
 * HTTP: the provider waits for its operator before agreeing after ACCEPTED, before finalizing
 * after VERIFIED and before the first start of a transfer under a stepwise offer; the consumer
 * (`stepwise: true`) before verifying after AGREED. While a hold lasts, the counterparty's
 * messages that the state does not allow are refused and the state stays. Also a peer's data
 * address without endpointProperties (what the DSP TCK sends) and reasons given as objects.
 */
import { expect } from 'chai';
import { randomUUID } from 'node:crypto';
import { client, type Client } from '../support/http.js';
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
import { recordHistory } from '../support/histories.js';

const DSP_CONTEXT = ['https://w3id.org/dspace/2025/1/context.jsonld'];

// eslint-disable-next-line @typescript-eslint/no-explicit-any -- tests read processes of every shape
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

const notes = (p: Json): string[] => p.history.map((h: { note: string | null }) => h.note);

describe('operator holds at our own moves (approval stepwise)', function () {
  this.timeout(180_000);
  let authority: RunningAuthority;
  let backend: RunningBuildingBackend;
  let provider: Participant;
  let consumer: Participant;

  before(async () => {
    ({ authority, backend } = await startDataspace());
    provider = await startParticipant('provider', authority, { APPROVAL_DEADLINE: 'PT60S' });
    consumer = await startParticipant('consumer', authority, { APPROVAL_DEADLINE: 'PT60S' });
    await publishOffer(provider, backend, 'manual', 'stepwise-offer');
    await setApproval(provider, 'stepwise-offer', 'stepwise');
  });
  after(async () => {
    await consumer?.connector.stop();
    await provider?.connector.stop();
    await backend?.close();
    await authority?.close();
  });

  async function setApproval(side: Participant, offerId: string, approval: string) {
    const res = await side.api.put(`/api/v1/offers/${offerId}`, {
      asset_id: `product-${offerId}`,
      access_policy_id: 'members',
      contract_policy_id: 'read-only',
      approval,
    });
    expect(res.status, JSON.stringify(res.body)).to.equal(200);
    expect(res.body.approval).to.equal(approval);
  }

  const start = (offerId: string, extra: Record<string, unknown> = {}) =>
    consumer.api.post('/api/v1/negotiations', {
      counterparty_address: provider.dsp,
      counterparty_did: provider.did,
      offer_id: offerId,
      dataset_id: `product-${offerId}`,
      ...extra,
    });

  async function providerSide(consumerPid: string, kind: 'negotiations' | 'transfers') {
    const deadline = Date.now() + 10_000;
    for (;;) {
      const list = await provider.api.get(`/api/v1/${kind}?role=provider&limit=200`);
      const found = list.body.items.find((n: { consumer_pid: string }) => n.consumer_pid === consumerPid);
      if (found) return found as { id: string };
      if (Date.now() > deadline) throw new Error(`the provider never got ${consumerPid}`);
      await new Promise((r) => setTimeout(r, 25));
    }
  }

  const decide = (side: Participant, id: string, action: string, body?: unknown) =>
    side.api.post(`/api/v1/negotiations/${encodeURIComponent(id)}/${action}`, body);
  const act = (side: Participant, id: string, action: string) =>
    side.api.post(`/api/v1/transfers/${encodeURIComponent(id)}/${action}`);

  /** Speaks DSP as `from` to `to`, with `from`'s real connector token. */
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

  /** Waits for a negotiation to hold in `state` for its operator. */
  const held = (side: Participant, id: string, state: string) =>
    waitFor(side.api, id, (n) => n.state === state && n.approval === 'pending');

  async function recordBoth(consumerId: string, providerId: string, name: string) {
    for (const [side, id, role] of [
      [consumer, consumerId, 'consumer'],
      [provider, providerId, 'provider'],
    ] as const) {
      const row = await side.connector.db('negotiations').where({ id }).first('workflow_id');
      await side.connector.temporal.workflow.getHandle(row.workflow_id).result();
      await recordHistory(side.connector, row.workflow_id, `negotiation-${role}-${name}`);
    }
  }

  it('offers the approval modes automatic, manual and stepwise (invalid_request otherwise)', async () => {
    const read = await provider.api.get('/api/v1/offers/stepwise-offer');
    expect(read.body.approval).to.equal('stepwise');
    const wrong = await provider.api.put('/api/v1/offers/stepwise-offer', {
      asset_id: 'product-stepwise-offer',
      access_policy_id: 'members',
      contract_policy_id: 'read-only',
      approval: 'sometimes',
    });
    expectError(wrong, 400, 'invalid_request', 'approval');
    expectError(await start('stepwise-offer', { stepwise: 'yes' }), 400, 'invalid_request', 'stepwise');
  });

  it('waits for the operator before each of its moves on both sides; approve makes the move, the peer cannot skip a hold', async () => {
    const started = await start('stepwise-offer', { stepwise: true });
    expect(started.status, JSON.stringify(started.body)).to.equal(201);
    const cid = started.body.id as string;
    const { id: pid } = await providerSide(started.body.consumer_pid, 'negotiations');

    // REQUESTED: as with manual approval; answered with a counter-offer, which the consumer accepts.
    const requested = await held(provider, pid, 'REQUESTED');
    expect(Date.parse(requested.expires_at)).to.be.greaterThan(Date.now());
    const counter = await decide(provider, pid, 'counter-offer', {
      offer: { '@id': 'stepwise-counter', permission: [{ action: 'read' }] },
    });
    expect(counter.status, JSON.stringify(counter.body)).to.equal(200);
    await waitFor(consumer.api, cid, (n) => n.state === 'OFFERED' && n.approval === 'pending');
    expect((await decide(consumer, cid, 'accept')).body.state).to.equal('ACCEPTED');

    // ACCEPTED: the provider holds its agreement; only approve or terminate are possible.
    const accepted = await held(provider, pid, 'ACCEPTED');
    expect(notes(accepted)).to.include('awaiting approval to agree');
    expectError(
      await decide(provider, pid, 'reject', { reason: 'no' }),
      409,
      'conflict',
      'approve or terminate',
    );
    expectError(
      await decide(provider, pid, 'counter-offer', {
        offer: { '@id': 'another', permission: [{ action: 'read' }] },
      }),
      409,
      'conflict',
    );
    // The consumer cannot verify an agreement that was never sent (TCK CN:03-03).
    const early = await dspAs(consumer, provider).post(`/negotiations/${pid}/agreement/verification`, {
      '@context': DSP_CONTEXT,
      '@id': `urn:uuid:${randomUUID()}`,
      '@type': 'ContractAgreementVerificationMessage',
      providerPid: pid,
      consumerPid: started.body.consumer_pid,
    });
    expect(early.status).to.equal(400);
    expect(early.body).to.include({ '@type': 'ContractNegotiationError', code: 'invalid_transition' });
    expect((await dspAs(consumer, provider).get(`/negotiations/${pid}`)).body.state).to.equal('ACCEPTED');
    const agreed = await decide(provider, pid, 'approve');
    expect(agreed.status, JSON.stringify(agreed.body)).to.equal(200);
    expect(agreed.body.approval).to.equal('approved');

    // AGREED: the consumer (stepwise: true) holds its verification.
    const agreement = await held(consumer, cid, 'AGREED');
    expect(notes(agreement)).to.include('awaiting approval to verify the agreement');
    expectError(await decide(consumer, cid, 'accept'), 409, 'conflict');
    // A FINALIZED event before our verification is refused, and the state stays (TCK CN_C:03-06).
    const finalized = await dspAs(provider, consumer).post(`/negotiations/${cid}/events`, {
      '@context': DSP_CONTEXT,
      '@id': `urn:uuid:${randomUUID()}`,
      '@type': 'ContractNegotiationEventMessage',
      providerPid: pid,
      consumerPid: cid,
      eventType: 'FINALIZED',
    });
    expect(finalized.status).to.equal(400);
    expect(finalized.body).to.include({ '@type': 'ContractNegotiationError', code: 'invalid_transition' });
    expect((await dspAs(provider, consumer).get(`/negotiations/${cid}`)).body.state).to.equal('AGREED');
    expect((await decide(consumer, cid, 'approve')).body).to.include({ approval: 'approved' });

    // VERIFIED: the provider holds its finalization.
    const verified = await held(provider, pid, 'VERIFIED');
    expect(notes(verified)).to.include('awaiting approval to finalize');
    expect((await decide(provider, pid, 'approve')).body.approval).to.equal('approved');
    await waitFor(provider.api, pid, (n) => n.state === 'FINALIZED');
    const done = await waitFor(consumer.api, cid, (n) => n.state === 'FINALIZED');
    const stored = await consumer.api.get(`/api/v1/agreements/${encodeURIComponent(done.agreement_id)}`);
    expect(stored.body.agreement.permission).to.deep.equal([{ action: 'read' }]);
    expectError(await decide(provider, pid, 'approve'), 409, 'conflict');
    await recordBoth(cid, pid, 'stepwise');
  });

  it('terminates at a hold: the provider after VERIFIED, the consumer after AGREED; the other side learns why', async () => {
    // Provider, at VERIFIED (TCK CN:02-07).
    const a = await start('stepwise-offer');
    const { id: pa } = await providerSide(a.body.consumer_pid, 'negotiations');
    await held(provider, pa, 'REQUESTED');
    await decide(provider, pa, 'approve');
    await held(provider, pa, 'VERIFIED');
    const ended = await decide(provider, pa, 'terminate');
    expect(ended.body).to.include({ state: 'TERMINATED', approval: 'rejected' });
    const seen = await waitFor(consumer.api, a.body.id, (n) => n.state === 'TERMINATED');
    expect(seen.error).to.equal('terminated: terminated by the operator');
    expect(seen.agreement_id).to.be.a('string');
    expect(
      (await consumer.api.get(`/api/v1/agreements/${encodeURIComponent(seen.agreement_id)}`)).status,
    ).to.equal(404);

    // Consumer, at AGREED (TCK CN_C:02-03).
    const b = await start('stepwise-offer', { stepwise: true });
    const { id: pb } = await providerSide(b.body.consumer_pid, 'negotiations');
    await held(provider, pb, 'REQUESTED');
    await decide(provider, pb, 'approve');
    await held(consumer, b.body.id, 'AGREED');
    expect((await decide(consumer, b.body.id, 'terminate')).body.state).to.equal('TERMINATED');
    const theirs = await waitFor(provider.api, pb, (n) => n.state === 'TERMINATED');
    expect(theirs.error).to.equal('terminated: terminated by the operator');
  });

  it('ends a hold that no operator decides by the approval deadline, and tells the counterparty', async () => {
    const hasty = await startParticipant('hasty', authority, { APPROVAL_DEADLINE: 'PT1S' });
    try {
      await publishOffer(provider, backend, 'automatic', 'prompt-offer');
      const started = await hasty.api.post('/api/v1/negotiations', {
        counterparty_address: provider.dsp,
        counterparty_did: provider.did,
        offer_id: 'prompt-offer',
        dataset_id: 'product-prompt-offer',
        stepwise: true,
      });
      expect(started.status, JSON.stringify(started.body)).to.equal(201);
      const expired = await waitFor(hasty.api, started.body.id, (n) => n.state === 'TERMINATED');
      expect(expired.approval).to.equal('expired');
      expect(expired.error).to.equal('no operator approved to verify the agreement before the deadline');
      const { id: pid } = await providerSide(started.body.consumer_pid, 'negotiations');
      const told = await waitFor(provider.api, pid, (n) => n.state === 'TERMINATED');
      expect(told.error).to.equal(
        'approval_expired: no operator approved to verify the agreement before the deadline',
      );
      expectError(await decide(hasty, started.body.id, 'approve'), 409, 'conflict');
    } finally {
      await hasty.connector.stop();
    }
  });

  describe('transfers under an agreement of a stepwise offer', () => {
    let agreementId: string;

    before(async () => {
      // Agreed while the offer was automatic: the mode counts when a transfer is requested.
      await publishOffer(provider, backend, 'automatic', 'held-offer');
      const started = await start('held-offer');
      const done = await waitFor(consumer.api, started.body.id, (n) => n.state === 'FINALIZED');
      agreementId = done.agreement_id;
      // Each side stores the agreement right after it records FINALIZED.
      const deadline = Date.now() + 10_000;
      for (const side of [provider, consumer]) {
        while ((await side.api.get(`/api/v1/agreements/${encodeURIComponent(agreementId)}`)).status !== 200) {
          if (Date.now() > deadline) throw new Error('the agreement was never stored on both sides');
          await new Promise((r) => setTimeout(r, 25));
        }
      }
      await setApproval(provider, 'held-offer', 'stepwise');
    });

    /** A transfer the consumer requested, held by the provider in REQUESTED. */
    async function heldTransfer() {
      const started = await consumer.api.post('/api/v1/transfers', { agreement_id: agreementId });
      expect(started.status, JSON.stringify(started.body)).to.equal(201);
      const { id: pid } = await providerSide(started.body.consumer_pid, 'transfers');
      const p = await waitTransfer(provider.api, pid, (t) => t.flow_state === 'awaiting_start');
      expect(p.state).to.equal('REQUESTED');
      expect(notes(p)).to.include("awaiting an operator's start");
      const c = await waitTransfer(consumer.api, started.body.id, (t) => t.provider_pid !== null);
      return { c, p };
    }

    const message = (type: string, pids: { providerPid: string; consumerPid: string }, extra = {}) => ({
      '@context': DSP_CONTEXT,
      '@id': `urn:uuid:${randomUUID()}`,
      '@type': type,
      ...pids,
      ...extra,
    });

    it('holds the first start in REQUESTED until the operator starts it; illegal messages meanwhile are refused', async () => {
      const { c, p } = await heldTransfer();
      const pids = { providerPid: p.id, consumerPid: c.consumer_pid };
      const asConsumer = dspAs(consumer, provider);
      expect((await asConsumer.get(`/transfers/${p.id}`)).body.state).to.equal('REQUESTED');
      // Completion and suspension are illegal in REQUESTED (TCK TP:03-01, TP:03-02).
      for (const [type, path] of [
        ['TransferCompletionMessage', 'completion'],
        ['TransferSuspensionMessage', 'suspension'],
      ] as const) {
        const refused = await asConsumer.post(`/transfers/${p.id}/${path}`, message(type, pids));
        expect(refused.status).to.equal(400);
        expect(refused.body).to.include({ '@type': 'TransferError', code: 'invalid_transition' });
      }
      expect((await asConsumer.get(`/transfers/${p.id}`)).body.state).to.equal('REQUESTED');
      // Only the provider's operator starts; the consumer's cannot.
      expectError(await act(consumer, c.id, 'start'), 409, 'conflict', 'requested');
      expectError(await act(provider, p.id, 'suspend'), 409, 'conflict');
      const startedByOperator = await act(provider, p.id, 'start');
      expect(startedByOperator.status, JSON.stringify(startedByOperator.body)).to.equal(200);
      expect(startedByOperator.body).to.include({ state: 'STARTED', flow_state: 'started' });
      expect(notes(startedByOperator.body).some((n) => n?.startsWith('start by '))).to.equal(true);
      const running = await waitTransfer(consumer.api, c.id, (t) => t.state === 'STARTED' && t.data_address);
      expect(running.flow_state).to.equal('ready');
      // A running transfer is not started again.
      expectError(await act(provider, p.id, 'start'), 409, 'conflict', 'started');
      expect((await act(consumer, c.id, 'complete')).body.state).to.equal('COMPLETED');
      await waitTransfer(provider.api, p.id, (t) => t.state === 'COMPLETED');

      for (const [side, id, name] of [
        [provider, p.id, 'transfer-provider-held'],
        [consumer, c.id, 'transfer-consumer-held'],
      ] as const) {
        const row = await side.connector.db('transfers').where({ id }).first('workflow_id');
        await side.connector.temporal.workflow.getHandle(row.workflow_id).result();
        await recordHistory(side.connector, row.workflow_id, name);
      }
    });

    it('terminates a held transfer from either side (TCK TP:01-05, TP:02-05)', async () => {
      const first = await heldTransfer();
      const byProvider = await act(provider, first.p.id, 'terminate');
      expect(byProvider.body).to.include({ state: 'TERMINATED', flow_state: 'terminated' });
      const seen = await waitTransfer(consumer.api, first.c.id, (t) => t.state === 'TERMINATED');
      expect(seen.error).to.include('terminated');

      const second = await heldTransfer();
      expect((await act(consumer, second.c.id, 'terminate')).body.state).to.equal('TERMINATED');
      const theirs = await waitTransfer(provider.api, second.p.id, (t) => t.state === 'TERMINATED');
      expect(theirs.error).to.include('terminate');
      expectError(await act(provider, second.p.id, 'start'), 409, 'conflict');
    });

    it("takes a peer's start without endpointProperties and never renews it; malformed addresses are refused before the workflow", async () => {
      const { c, p } = await heldTransfer();
      const asProvider = dspAs(provider, consumer);
      const pids = { providerPid: p.id, consumerPid: c.consumer_pid };
      const at = `/transfers/${c.id}/start`;
      // What the DSP TCK sends: no endpointProperties (optional in DSP 2025-1).
      const bare = {
        '@type': 'DataAddress',
        endpoint: 'http://example.com',
        endpointType: 'https://w3id.org/idsa/v4.1/HTTP',
      };
      for (const [dataAddress, why] of [
        [{ ...bare, endpointProperties: 'token' }, 'endpointProperties'],
        [{ ...bare, endpointProperties: [{ name: 'authorization' }] }, 'value'],
        [{ ...bare, endpointProperties: [{ name: 'a', value: 1 }] }, 'value'],
        [{ ...bare, '@type': 'Address' }, '@type'],
        [{ ...bare, endpoint: 'ftp://example.com' }, 'endpoint'],
        [{ '@type': 'DataAddress', endpointType: 'https://w3id.org/idsa/v4.1/HTTP' }, 'endpoint'],
        [{ ...bare, endpointType: undefined }, 'endpointType'],
      ] as const) {
        const refused = await asProvider.post(at, message('TransferStartMessage', pids, { dataAddress }));
        expect(refused.status, JSON.stringify(dataAddress)).to.equal(400);
        expect(refused.body).to.include({ '@type': 'TransferError', code: 'invalid_message' });
        expect(refused.body.reason.join(' ')).to.include(why);
      }
      expect((await consumer.api.get(`/api/v1/transfers/${encodeURIComponent(c.id)}`)).body.state).to.equal(
        'REQUESTED',
      );

      const accepted = await asProvider.post(
        at,
        message('TransferStartMessage', pids, { dataAddress: bare }),
      );
      expect(accepted.status, JSON.stringify(accepted.body)).to.equal(200);
      expect(accepted.body).to.include({ '@type': 'TransferProcess', state: 'STARTED' });
      const started = await waitTransfer(consumer.api, c.id, (t) => t.state === 'STARTED');
      expect(started).to.include({ flow_state: 'ready', dataplane_endpoint: 'http://example.com' });
      expect(started.data_address).to.deep.equal({ ...bare, endpointProperties: [] });
      // The workflow keeps answering: a suspension with reasons as objects, then a termination.
      const suspended = await asProvider.post(
        `/transfers/${c.id}/suspension`,
        message('TransferSuspensionMessage', pids, {
          code: 'paused',
          reason: [{ message: 'maintenance window' }, { '@value': 'onderhoud', '@language': 'nl' }],
        }),
      );
      expect(suspended.status, JSON.stringify(suspended.body)).to.equal(200);
      const paused = await waitTransfer(consumer.api, c.id, (t) => t.state === 'SUSPENDED');
      expect(notes(paused)).to.include('paused: maintenance window; onderhoud');
      expect(notes(paused).some((n) => n?.startsWith('renewing'))).to.equal(false);
      const terminated = await asProvider.post(
        `/transfers/${c.id}/termination`,
        message('TransferTerminationMessage', pids, {
          code: 'ended',
          reason: [{ message: 'done here' }, { detail: 42 }, 'plain'],
        }),
      );
      expect(terminated.status).to.equal(200);
      const ended = await waitTransfer(consumer.api, c.id, (t) => t.state === 'TERMINATED');
      expect(ended.error).to.equal('ended: done here; {"detail":42}; plain');
      // Our real provider still holds its side; its operator ends it.
      expect((await act(provider, p.id, 'terminate')).body.state).to.equal('TERMINATED');
    });
  });
});
