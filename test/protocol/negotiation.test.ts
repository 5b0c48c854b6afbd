/**
 * Two connectors negotiate over loopback HTTP with DSP 2025-1: each with its own database,
 * worker and DID, members of one authority stand-in.
 */
import { expect } from 'chai';
import { randomUUID } from 'node:crypto';
import { client } from '../support/http.js';
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
import { recordHistory, replayNegotiations } from '../support/histories.js';
import type { RunningBuildingBackend } from '../../dev/building-backend/index.js';

const DSP_CONTEXT = ['https://w3id.org/dspace/2025/1/context.jsonld'];

describe('contract negotiation between two connectors (DSP 2025-1)', function () {
  this.timeout(120_000);
  let authority: RunningAuthority;
  let backend: RunningBuildingBackend;
  let provider: Participant;
  let consumer: Participant;

  before(async () => {
    ({ authority, backend } = await startDataspace());
    provider = await startParticipant('provider', authority, { APPROVAL_DEADLINE: 'PT2S' });
    consumer = await startParticipant('consumer', authority);
  });
  after(async () => {
    await consumer?.connector.stop();
    await provider?.connector.stop();
    await backend?.close();
    await authority?.close();
  });

  const start = (offerId: string, datasetId: string, extra: Record<string, unknown> = {}) =>
    consumer.api.post('/api/v1/negotiations', {
      counterparty_address: provider.dsp,
      counterparty_did: provider.did,
      offer_id: offerId,
      dataset_id: datasetId,
      ...extra,
    });

  /** The provider's side of a negotiation the consumer started (it arrives a moment later). */
  async function providerSide(consumerPid: string) {
    const deadline = Date.now() + 10_000;
    for (;;) {
      const list = await provider.api.get('/api/v1/negotiations?role=provider&limit=200');
      const found = list.body.items.find((n: { consumer_pid: string }) => n.consumer_pid === consumerPid);
      if (found) return found as { id: string };
      if (Date.now() > deadline) throw new Error(`the provider never got ${consumerPid}`);
      await new Promise((r) => setTimeout(r, 25));
    }
  }

  /** Saves the histories of both sides (RECORD_HISTORIES=1) for the replay suite. */
  async function recordBoth(consumerId: string, providerId: string, name: string) {
    for (const [side, id, role] of [
      [consumer, consumerId, 'consumer'],
      [provider, providerId, 'provider'],
    ] as const) {
      const row = await side.connector.db('negotiations').where({ id }).first('workflow_id');
      await recordHistory(side.connector, row.workflow_id, `negotiation-${role}-${name}`);
    }
  }

  /** The consumer's own connector token for the provider, to speak DSP directly in tests. */
  const asConsumer = async () => ({
    authorization: `Bearer ${await consumer.connector.identity.issueToken(provider.did)}`,
  });

  it('serves the DSP version metadata without authentication', async () => {
    const res = await client(provider.connector.url).get('/.well-known/dspace-version');
    expect(res.status).to.equal(200);
    expect(res.body).to.deep.equal({
      protocolVersions: [{ version: '2025-1', path: '/dsp', binding: 'HTTPS' }],
    });
  });

  it('negotiates to FINALIZED on both sides with automatic approval, storing the agreement', async () => {
    const { offerId, datasetId } = await publishOffer(provider, backend, 'automatic', 'auto-offer');
    const started = await start(offerId, datasetId, { purpose: 'research', connection_alias: 'soda' });
    expect(started.status, JSON.stringify(started.body)).to.equal(201);
    expect(started.body).to.include({
      role: 'consumer',
      counterparty_did: provider.did,
      offer_id: offerId,
      connection_alias: 'soda',
      purpose: 'research',
    });
    const done = await waitFor(consumer.api, started.body.id, (n) => n.state === 'FINALIZED');
    expect(done.agreement_id).to.match(/^urn:uuid:/);
    expect(done.provider_pid).to.match(/^urn:uuid:/);
    expect(done.history.map((h: { state: string }) => h.state)).to.include.members([
      'REQUESTED',
      'AGREED',
      'VERIFIED',
      'FINALIZED',
    ]);
    expect(done.outbox).to.deep.equal([]);

    const theirs = await providerSide(started.body.consumer_pid);
    const p = await waitFor(provider.api, theirs.id, (n) => n.state === 'FINALIZED');
    expect(p).to.include({
      role: 'provider',
      counterparty_did: consumer.did,
      agreement_id: done.agreement_id,
      dataset_id: datasetId,
    });
    // Names come from the authority's registry.
    expect(p.counterparty_name).to.equal('consumer');
    expect(done.counterparty_name).to.equal('provider');
    expect(p.objects).to.deep.equal(['0363.10.0000000101']);
    expect(p.conflicts).to.deep.equal([]);

    for (const side of [provider, consumer]) {
      const a = await side.api.get(`/api/v1/agreements/${encodeURIComponent(done.agreement_id)}`);
      expect(a.status).to.equal(200);
      expect(a.body).to.include({
        dataset_id: datasetId,
        provider_did: provider.did,
        consumer_did: consumer.did,
        state: 'active',
      });
      expect(a.body.agreement).to.include({
        '@type': 'Agreement',
        target: datasetId,
        assigner: provider.did,
        assignee: consumer.did,
      });
    }
    await recordBoth(started.body.id, theirs.id, 'automatic');
    // The workflows carry search attributes for the Temporal UI.
    const row = await provider.connector.db('negotiations').where({ id: theirs.id }).first('workflow_id');
    const desc = await provider.connector.temporal.workflow.getHandle(row.workflow_id).describe();
    const attrs = desc.searchAttributes as Record<string, unknown[]>;
    expect(attrs.ConnectorProcess).to.deep.equal(['negotiation']);
    expect(attrs.ConnectorRole).to.deep.equal(['provider']);
    expect(attrs.ConnectorState).to.deep.equal(['FINALIZED']);
    expect(attrs.Counterparty).to.deep.equal([consumer.did]);
  });

  it('stores the consumer agreement before FINALIZED shows: it reads and a transfer starts at once', async () => {
    const { offerId, datasetId } = await publishOffer(provider, backend, 'automatic', 'stored-first');
    const started = await start(offerId, datasetId);
    expect(started.status, JSON.stringify(started.body)).to.equal(201);
    const done = await waitFor(consumer.api, started.body.id, (n) => n.state === 'FINALIZED');
    // Straight after the first read that shows FINALIZED, with no wait in between.
    const agreement = await consumer.api.get(`/api/v1/agreements/${encodeURIComponent(done.agreement_id)}`);
    expect(agreement.status, JSON.stringify(agreement.body)).to.equal(200);
    expect(agreement.body).to.include({ negotiation_id: started.body.id, role: 'consumer', state: 'active' });
    // The agreement row exists before the FINALIZED entry is written (not only by the time we look).
    const finalized = done.history.find((h: { state: string }) => h.state === 'FINALIZED');
    expect(Date.parse(agreement.body.created_at)).to.be.at.most(Date.parse(finalized.at));
    const transfer = await consumer.api.post('/api/v1/transfers', { agreement_id: done.agreement_id });
    expect(transfer.status, JSON.stringify(transfer.body)).to.equal(201);
    expect(transfer.body).to.include({ role: 'consumer', agreement_id: done.agreement_id });
  });

  it('waits for an operator with manual approval; approve finalizes it', async () => {
    const { offerId, datasetId } = await publishOffer(provider, backend, 'manual', 'manual-offer');
    const started = await start(offerId, datasetId);
    expect(started.status).to.equal(201);
    const theirs = await providerSide(started.body.consumer_pid);
    const pending = await waitFor(provider.api, theirs.id, (n) => n.approval === 'pending');
    expect(pending.state).to.equal('REQUESTED');
    expect(Date.parse(pending.expires_at)).to.be.greaterThan(Date.now() - 1000);
    const approved = await provider.api.post(`/api/v1/negotiations/${encodeURIComponent(theirs.id)}/approve`);
    expect(approved.status, JSON.stringify(approved.body)).to.equal(200);
    expect(approved.body.approval).to.equal('approved');
    expect(approved.body.decided_by).to.include('initial admin');
    expect(approved.body.decided_at).to.be.a('string');
    await waitFor(consumer.api, started.body.id, (n) => n.state === 'FINALIZED');
    await waitFor(provider.api, theirs.id, (n) => n.state === 'FINALIZED');
    await recordBoth(started.body.id, theirs.id, 'approved');
    expectError(
      await provider.api.post(`/api/v1/negotiations/${encodeURIComponent(theirs.id)}/approve`),
      409,
      'conflict',
    );
    expectError(
      await provider.api.post(`/api/v1/negotiations/${encodeURIComponent(theirs.id)}/terminate`),
      409,
      'conflict',
      'ended',
    );
  });

  it('rejects with a reason the consumer sees; too long a reason is invalid_request', async () => {
    const started = await start('manual-offer', 'product-manual-offer');
    const theirs = await providerSide(started.body.consumer_pid);
    await waitFor(provider.api, theirs.id, (n) => n.approval === 'pending');
    const path = `/api/v1/negotiations/${encodeURIComponent(theirs.id)}/reject`;
    expectError(await provider.api.post(path, { reason: 'x'.repeat(501) }), 400, 'invalid_request', 'reason');
    const rejected = await provider.api.post(path, { reason: 'not for commercial parties' });
    expect(rejected.status).to.equal(200);
    expect(rejected.body).to.include({ state: 'TERMINATED', approval: 'rejected' });
    const seen = await waitFor(consumer.api, started.body.id, (n) => n.state === 'TERMINATED');
    expect(seen.error).to.include('not for commercial parties');
    await waitFor(provider.api, theirs.id, (n) =>
      n.history.some(
        (h: { message_type: string }) => h.message_type === 'ContractNegotiationTerminationMessage',
      ),
    );
    await recordBoth(started.body.id, theirs.id, 'rejected');
    expectError(await provider.api.post(path, { reason: 'again' }), 409, 'conflict');
  });

  it('refuses a request whose approval deadline passed, towards the consumer', async () => {
    const started = await start('manual-offer', 'product-manual-offer');
    const theirs = await providerSide(started.body.consumer_pid);
    const expired = await waitFor(provider.api, theirs.id, (n) => n.approval === 'expired', 20_000);
    expect(expired.state).to.equal('TERMINATED');
    const seen = await waitFor(consumer.api, started.body.id, (n) => n.state === 'TERMINATED');
    expect(seen.error).to.include('expired');
    expectError(
      await provider.api.post(`/api/v1/negotiations/${encodeURIComponent(theirs.id)}/approve`),
      409,
      'conflict',
      'expired',
    );
  });

  it('terminates from either side; the other side follows', async () => {
    const a = await start('manual-offer', 'product-manual-offer');
    const theirs = await providerSide(a.body.consumer_pid);
    await waitFor(provider.api, theirs.id, (n) => n.approval === 'pending');
    const byConsumer = await consumer.api.post(
      `/api/v1/negotiations/${encodeURIComponent(a.body.id)}/terminate`,
    );
    expect(byConsumer.status).to.equal(200);
    expect(byConsumer.body.state).to.equal('TERMINATED');
    await waitFor(provider.api, theirs.id, (n) => n.state === 'TERMINATED');

    const b = await start('manual-offer', 'product-manual-offer');
    const theirsB = await providerSide(b.body.consumer_pid);
    await waitFor(provider.api, theirsB.id, (n) => n.approval === 'pending');
    const byProvider = await provider.api.post(
      `/api/v1/negotiations/${encodeURIComponent(theirsB.id)}/terminate`,
    );
    expect(byProvider.body).to.include({ state: 'TERMINATED', approval: 'rejected' });
    await waitFor(consumer.api, b.body.id, (n) => n.state === 'TERMINATED');
  });

  it('follows a counter-offer: the provider counters, the consumer accepts, the agreement carries the counter-offer', async () => {
    const started = await start('manual-offer', 'product-manual-offer');
    const theirs = await providerSide(started.body.consumer_pid);
    await waitFor(provider.api, theirs.id, (n) => n.approval === 'pending');
    const counter = {
      '@id': 'counter-1',
      permission: [
        {
          action: 'read',
          constraint: [{ leftOperand: 'odrl:purpose', operator: 'eq', rightOperand: 'research' }],
        },
      ],
    };
    expectError(
      await consumer.api.post(`/api/v1/negotiations/${encodeURIComponent(started.body.id)}/accept`),
      409,
      'conflict',
      'no offer to accept',
    );
    expectError(
      await provider.api.post(`/api/v1/negotiations/${encodeURIComponent(theirs.id)}/counter-offer`, {
        offer: { '@id': 'x' },
      }),
      400,
      'invalid_request',
      'offer',
    );
    const countered = await provider.api.post(
      `/api/v1/negotiations/${encodeURIComponent(theirs.id)}/counter-offer`,
      { offer: counter },
    );
    expect(countered.status, JSON.stringify(countered.body)).to.equal(200);
    expect(countered.body).to.include({ state: 'OFFERED', approval: 'countered' });
    const offered = await waitFor(consumer.api, started.body.id, (n) => n.state === 'OFFERED');
    expect(offered.offer).to.deep.include({ '@id': 'counter-1' });
    const accepted = await consumer.api.post(
      `/api/v1/negotiations/${encodeURIComponent(started.body.id)}/accept`,
    );
    expect(accepted.status, JSON.stringify(accepted.body)).to.equal(200);
    expect(accepted.body.state).to.equal('ACCEPTED');
    const done = await waitFor(consumer.api, started.body.id, (n) => n.state === 'FINALIZED');
    await waitFor(provider.api, theirs.id, (n) => n.state === 'FINALIZED');
    const agreement = await provider.api.get(`/api/v1/agreements/${encodeURIComponent(done.agreement_id)}`);
    expect(agreement.body.agreement.permission).to.deep.equal(counter.permission);
    await recordBoth(started.body.id, theirs.id, 'countered');
  });

  it('answers a repeated initial request with the same negotiation and no second effect', async () => {
    const consumerPid = `urn:uuid:${randomUUID()}`;
    const message = {
      '@context': DSP_CONTEXT,
      '@id': `urn:uuid:${randomUUID()}`,
      '@type': 'ContractRequestMessage',
      consumerPid,
      callbackAddress: consumer.dsp,
      offer: { '@id': 'manual-offer', '@type': 'Offer', target: 'product-manual-offer' },
    };
    const dsp = client(provider.dsp);
    const first = await dsp.post('/negotiations/request', message, await asConsumer());
    const second = await dsp.post('/negotiations/request', message, await asConsumer());
    expect(first.status, JSON.stringify(first.body)).to.equal(201);
    expect(second.status).to.equal(201);
    expect(second.body).to.deep.equal(first.body);
    expect(first.body).to.include({ '@type': 'ContractNegotiation', consumerPid, state: 'REQUESTED' });
    const all = (await provider.api.get('/api/v1/negotiations?role=provider&limit=200')).body.items.filter(
      (n: { consumer_pid: string }) => n.consumer_pid === consumerPid,
    );
    expect(all).to.have.length(1);
    const read = await dsp.get(
      `/negotiations/${encodeURIComponent(first.body.providerPid)}`,
      await asConsumer(),
    );
    expect(read.body).to.deep.equal(first.body);
  });

  it('answers an illegal transition with 400 and an unknown process with 404 (ContractNegotiationError)', async () => {
    const consumerPid = `urn:uuid:${randomUUID()}`;
    const dsp = client(provider.dsp);
    const created = await dsp.post(
      '/negotiations/request',
      {
        '@context': DSP_CONTEXT,
        '@type': 'ContractRequestMessage',
        consumerPid,
        callbackAddress: consumer.dsp,
        offer: { '@id': 'manual-offer' },
      },
      await asConsumer(),
    );
    expect(created.status).to.equal(201);
    const providerPid = created.body.providerPid as string;
    // Verification before any agreement: illegal in REQUESTED.
    const illegal = await dsp.post(
      `/negotiations/${encodeURIComponent(providerPid)}/agreement/verification`,
      { '@context': DSP_CONTEXT, '@type': 'ContractAgreementVerificationMessage', providerPid, consumerPid },
      await asConsumer(),
    );
    expect(illegal.status).to.equal(400);
    expect(illegal.body).to.include({
      '@type': 'ContractNegotiationError',
      code: 'invalid_transition',
      providerPid,
      consumerPid,
    });
    expect(illegal.body.reason[0]).to.include('REQUESTED');
    // FINALIZED is the provider's to send, never the consumer's.
    const wrongSender = await dsp.post(
      `/negotiations/${encodeURIComponent(providerPid)}/events`,
      {
        '@context': DSP_CONTEXT,
        '@type': 'ContractNegotiationEventMessage',
        providerPid,
        consumerPid,
        eventType: 'FINALIZED',
      },
      await asConsumer(),
    );
    expect(wrongSender.status).to.equal(400);
    const unknown = await dsp.post(
      '/negotiations/urn:uuid:00000000-0000-4000-8000-000000000000/termination',
      {
        '@context': DSP_CONTEXT,
        '@type': 'ContractNegotiationTerminationMessage',
        providerPid: 'urn:uuid:00000000-0000-4000-8000-000000000000',
        consumerPid,
      },
      await asConsumer(),
    );
    expect(unknown.status).to.equal(404);
    expect(unknown.body['@type']).to.equal('ContractNegotiationError');
    const badOffer = await dsp.post(
      '/negotiations/request',
      {
        '@context': DSP_CONTEXT,
        '@type': 'ContractRequestMessage',
        consumerPid: `urn:uuid:${randomUUID()}`,
        callbackAddress: consumer.dsp,
        offer: { '@id': 'no-such-offer' },
      },
      await asConsumer(),
    );
    expect(badOffer.status).to.equal(400);
    expect(badOffer.body.code).to.equal('unknown_offer');
    const invalid = await dsp.post(
      '/negotiations/request',
      { '@type': 'ContractRequestMessage' },
      await asConsumer(),
    );
    expect(invalid.status).to.equal(400);
    expect(invalid.body['@type']).to.equal('ContractNegotiationError');
  });

  it('treats an offer the caller may not see as unknown when it is requested', async () => {
    expect(
      (
        await provider.api.post('/api/v1/policies', {
          id: 'not-the-consumer',
          permissions: [
            {
              action: 'use',
              constraints: [
                { left_operand: 'pl:participant', operator: 'isNoneOf', right_operand: [consumer.did] },
              ],
            },
          ],
        })
      ).status,
    ).to.equal(201);
    expect(
      (
        await provider.api.post('/api/v1/offers', {
          id: 'hidden-offer',
          asset_id: 'product-auto-offer',
          access_policy_id: 'not-the-consumer',
          contract_policy_id: 'read-only',
        })
      ).status,
    ).to.equal(201);
    const catalog = await client(provider.dsp).post(
      '/catalog/request',
      { '@context': DSP_CONTEXT, '@type': 'CatalogRequestMessage' },
      await asConsumer(),
    );
    const offers = catalog.body.dataset.flatMap((d: { hasPolicy: Array<{ '@id': string }> }) =>
      d.hasPolicy.map((p) => p['@id']),
    );
    expect(offers).to.include('auto-offer');
    expect(offers).not.to.include('hidden-offer');
    const refused = await client(provider.dsp).post(
      '/negotiations/request',
      {
        '@context': DSP_CONTEXT,
        '@type': 'ContractRequestMessage',
        consumerPid: `urn:uuid:${randomUUID()}`,
        callbackAddress: consumer.dsp,
        offer: { '@id': 'hidden-offer' },
      },
      await asConsumer(),
    );
    expect(refused.status).to.equal(400);
    expect(refused.body).to.include({ '@type': 'ContractNegotiationError', code: 'unknown_offer' });
  });

  it('refuses unauthenticated and non-member callers', async () => {
    const body = { '@context': DSP_CONTEXT, '@type': 'CatalogRequestMessage' };
    const anonymous = await client(provider.dsp).post('/catalog/request', body);
    expect(anonymous.status).to.equal(401);
    const outsider = await startParticipant('outsider', authority, {}, false);
    try {
      const token = await outsider.connector.identity.issueToken(provider.did);
      const refused = await client(provider.dsp).post('/catalog/request', body, {
        authorization: `Bearer ${token}`,
      });
      expect(refused.status).to.equal(403);
    } finally {
      await outsider.connector.stop();
    }
  });

  it('shows the catalog: offers as datasets with their ODRL offer and building, filtered by access policy', async () => {
    const res = await client(provider.dsp).post(
      '/catalog/request',
      { '@context': DSP_CONTEXT, '@type': 'CatalogRequestMessage' },
      await asConsumer(),
    );
    expect(res.status).to.equal(200);
    expect(res.body).to.include({ '@type': 'Catalog', participantId: provider.did });
    const ds = res.body.dataset.find((d: { '@id': string }) => d['@id'] === 'product-auto-offer');
    expect(ds['pl:building_id']).to.equal('0363.10.0000000101');
    expect(ds.hasPolicy[0]).to.include({ '@id': 'auto-offer', '@type': 'Offer' });
    expect(ds.distribution[0].accessService.endpointURL).to.equal(provider.dsp);
    const one = await client(provider.dsp).get('/catalog/datasets/product-auto-offer', await asConsumer());
    expect(one.status).to.equal(200);
    const missing = await client(provider.dsp).get('/catalog/datasets/nope', await asConsumer());
    expect(missing.status).to.equal(404);
    expect(missing.body['@type']).to.equal('CatalogError');
  });

  it('completes a negotiation across a restart of the provider (worker and API gone meanwhile)', async () => {
    const started = await start('manual-offer', 'product-manual-offer');
    const theirs = await providerSide(started.body.consumer_pid);
    await waitFor(provider.api, theirs.id, (n) => n.approval === 'pending');
    const port = new URL(provider.connector.url).port;
    await provider.connector.stop();
    // The same connector comes back on its database, task queue and address.
    const again = await startTestConnector({
      name: 'provider',
      restartOf: provider.connector,
      env: {
        PORT: port,
        PUBLIC_URL: `http://127.0.0.1:${port}`,
        DID_WEB_ALLOW_HTTP: 'true',
        AUTHORITY_URL: authority.url,
        APPROVAL_DEADLINE: 'PT2S',
      },
    });
    provider = { ...provider, connector: again, api: client(again.url, again.adminKey) };
    expect(again.identity.did).to.equal(provider.did);
    // The request is still waiting (its deadline may have passed while the worker was away: then it expired).
    const after = await waitFor(
      provider.api,
      theirs.id,
      (n) => n.approval === 'pending' || n.approval === 'expired',
    );
    const approved =
      after.approval === 'pending'
        ? await provider.api.post(`/api/v1/negotiations/${encodeURIComponent(theirs.id)}/approve`)
        : null;
    // The deadline (2 s) may also pass between reading `pending` and the approval: then it expired.
    const expired =
      approved === null || (approved.status === 409 && /expired/.test(String(approved.body?.error?.message)));
    if (!expired) {
      expect(approved.status, JSON.stringify(approved.body)).to.equal(200);
      await waitFor(consumer.api, started.body.id, (n) => n.state === 'FINALIZED');
    } else {
      await waitFor(consumer.api, started.body.id, (n) => n.state === 'TERMINATED');
    }
  });

  it('delivers to a consumer that was down and came back: attempts visible, nothing lost', async () => {
    const { offerId, datasetId } = await publishOffer(provider, backend, 'manual', 'late-offer');
    const started = await start(offerId, datasetId);
    const theirs = await providerSide(started.body.consumer_pid);
    await waitFor(provider.api, theirs.id, (n) => n.approval === 'pending');
    const port = new URL(consumer.connector.url).port;
    await consumer.connector.stop();
    expect(
      (await provider.api.post(`/api/v1/negotiations/${encodeURIComponent(theirs.id)}/approve`)).status,
    ).to.equal(200);
    // The agreement cannot be delivered now: the provider shows the message with its attempts.
    const waiting = await waitFor(provider.api, theirs.id, (n) =>
      n.outbox.some((o: { attempts: number }) => o.attempts >= 1),
    );
    const row = waiting.outbox.find(
      (o: { message_type: string }) => o.message_type === 'ContractAgreementMessage',
    );
    expect(row).to.include({ status: 'pending', counterparty_did: consumer.did });
    expect(row.last_error).to.be.a('string');
    const again = await startTestConnector({
      name: 'consumer',
      restartOf: consumer.connector,
      env: {
        PORT: port,
        PUBLIC_URL: `http://127.0.0.1:${port}`,
        DID_WEB_ALLOW_HTTP: 'true',
        AUTHORITY_URL: authority.url,
      },
    });
    consumer = { ...consumer, connector: again, api: client(again.url, again.adminKey) };
    await waitFor(consumer.api, started.body.id, (n) => n.state === 'FINALIZED', 30_000);
    // FINALIZED is recorded as the event is sent; its delivery empties the outbox a moment later.
    const done = await waitFor(
      provider.api,
      theirs.id,
      (n) => n.state === 'FINALIZED' && n.outbox.length === 0,
    );
    expect(
      done.history.filter((h: { message_type: string }) => h.message_type === 'ContractAgreementMessage'),
    ).to.have.length(1);
  });

  it('records every message, decision and state change as evidence; both chains verify', async () => {
    for (const side of [provider, consumer]) {
      const list = (await side.api.get('/api/v1/negotiations?limit=200')).body.items as Array<{ id: string }>;
      const one = (await side.api.get(`/api/v1/negotiations/${encodeURIComponent(list[0]!.id)}`)).body;
      expect(one.history.length).to.be.at.least(1);
      for (const h of one.history) expect(h.evidence_id, JSON.stringify(h)).to.match(/^ev_/);
      const kinds = (await side.connector.db('evidence').distinct('kind')).map(
        (r: { kind: string }) => r.kind,
      );
      expect(kinds).to.include.members(['dsp.inbound', 'dsp.outbound', 'negotiation.state']);
      const verified = await side.api.get('/api/v1/evidence/chain/verify');
      expect(verified.status).to.equal(200);
      expect(verified.body).to.include({ ok: true, first_broken_seq: null });
      expect(verified.body.entries).to.be.greaterThan(10);
    }
    const decisions = await provider.connector
      .db('evidence')
      .where({ kind: 'operator.decision' })
      .count('* as n')
      .first();
    expect(Number(decisions!.n)).to.be.at.least(2);
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
