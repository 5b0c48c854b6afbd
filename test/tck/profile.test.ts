/**
 * The TCK profile (tck/profile): its authentication adapter, webhooks and seed data, on a real
 * connector; and that a connector without the profile has none of it.
 */
import http from 'node:http';
import { randomBytes } from 'node:crypto';
import { expect } from 'chai';
import { pino } from 'pino';
import { loadConfig } from '../../config.js';
import { startConnector, type RunningConnector } from '../../main.js';
import {
  createTestDatabase,
  requireStack,
  startTestConnector,
  TEST_KEY_ENCRYPTION_KEY,
  uniqueName,
} from '../support/stack.js';
import { client } from '../support/http.js';
import { freePort } from '../../dev/processes.js';
import { startBuildingBackend, type RunningBuildingBackend } from '../../dev/building-backend/index.js';
import { DSP_CONTEXT_URL } from '../../domain/dsp.js';
import { createTckProfile, tckParticipantDid, type TckProfile } from '../../tck/profile/index.js';
import { NEGOTIATION_WEBHOOK, TRANSFER_WEBHOOK } from '../../tck/profile/webhooks.js';

/** A stand-in for the TCK's callback server: records what it gets, acknowledges a contract request. */
function tckStandIn() {
  const received: Array<{ path: string; authorization: string | undefined; body: Record<string, unknown> }> =
    [];
  const server = http.createServer((req, res) => {
    let text = '';
    req.on('data', (c: Buffer) => (text += c.toString()));
    req.on('end', () => {
      const body = JSON.parse(text || '{}') as Record<string, unknown>;
      received.push({ path: req.url ?? '', authorization: req.headers.authorization, body });
      res.writeHead(201, { 'content-type': 'application/json' }).end(
        JSON.stringify({
          '@context': [DSP_CONTEXT_URL],
          '@type': 'ContractNegotiation',
          providerPid: 'urn:uuid:tck-provider-pid',
          consumerPid: body.consumerPid,
          state: 'REQUESTED',
        }),
      );
    });
  });
  return { server, received };
}

describe('DSP TCK profile (tck/profile)', function () {
  this.timeout(120_000);
  const authorization = `TCK ${randomBytes(24).toString('hex')}`;
  let backend: RunningBuildingBackend;
  let connector: RunningConnector;
  let profile: TckProfile;
  let tck: ReturnType<typeof tckStandIn>;
  let tckAddress: string;

  before(async () => {
    const { temporal, workflowBundle } = requireStack();
    backend = await startBuildingBackend({ keys: { k: '*' } });
    tck = tckStandIn();
    await new Promise<void>((r) => tck.server.listen(0, '127.0.0.1', () => r()));
    tckAddress = `http://127.0.0.1:${(tck.server.address() as { port: number }).port}`;
    const logger = pino({ level: process.env.TEST_LOG_LEVEL ?? 'silent' });
    profile = createTckProfile({ authorization, tckAddress, logger });
    const port = await freePort();
    connector = await startConnector(
      loadConfig({
        PORT: String(port),
        PUBLIC_URL: `http://127.0.0.1:${port}`,
        TEMPORAL_TASK_QUEUE: uniqueName('tq_tck'),
        LOG_LEVEL: 'silent',
        DEMO_BACKEND: '0',
        KEY_ENCRYPTION_KEY: TEST_KEY_ENCRYPTION_KEY,
        DID_WEB_ALLOW_HTTP: 'true',
      }),
      {
        databaseUrl: await createTestDatabase('tck'),
        temporalAddress: temporal.address,
        workflowBundle,
        logger,
        profile: profile.surface,
      },
    );
    await profile.attach({
      url: connector.url,
      adminKey: connector.initialAdminKey!,
      db: connector.db,
      did: connector.identity.did,
      backend: { url: backend.url, key: 'k' },
    });
  });

  after(async () => {
    await profile?.stop();
    await connector?.stop();
    await backend?.close();
    tck?.server.close();
  });

  const dsp = () => client(`${connector.url}/dsp`);
  const asTck = { authorization };
  const catalogRequest = { '@context': [DSP_CONTEXT_URL], '@type': 'CatalogRequestMessage' };

  it('takes exactly the configured Authorization value as the TCK participant', async () => {
    const res = await dsp().post('/catalog/request', catalogRequest, asTck);
    expect(res.status).to.equal(200);
    const ids = res.body.dataset.map((d: { '@id': string }) => d['@id']);
    expect(ids).to.include.members(['CAT0101', 'CAT0102', 'ACN0101', 'ACN0304']);
    expect(ids).not.to.include('CAT0103');
  });

  it('sends every other caller through the standard authentication', async () => {
    for (const header of [`${authorization}x`, authorization.toLowerCase(), `Bearer ${authorization}`]) {
      const res = await dsp().post('/catalog/request', catalogRequest, { authorization: header });
      expect(res.status).to.equal(401);
      expect(res.body).to.include({ '@type': 'CatalogError', code: 'missing_token' });
    }
    const anonymous = await dsp().post('/catalog/request', catalogRequest);
    expect(anonymous.status).to.equal(401);
    expect(anonymous.body.code).to.equal('missing_token');
  });

  it('serves a catalog the DSP 2025-1 schemas accept: @context of URLs, no empty rule lists', async () => {
    const res = await dsp().get('/catalog/datasets/ACN0101', asTck);
    expect(res.status).to.equal(200);
    expect(res.body['@context']).to.deep.equal([
      DSP_CONTEXT_URL,
      `${connector.url}/contexts/building-data-v1.jsonld`,
    ]);
    expect(res.body.hasPolicy).to.deep.equal([
      { '@id': 'CD123:ACN0101:456', '@type': 'Offer', permission: [{ action: 'use' }] },
    ]);
  });

  it('seeds finalized agreements: ATP* consumed by the TCK, ATPC* provided by it', async () => {
    const api = client(connector.url, connector.initialAdminKey!);
    const provided = await api.get('/api/v1/agreements/ATP0101');
    expect(provided.status).to.equal(200);
    expect(provided.body).to.include({
      role: 'provider',
      provider_did: connector.identity.did,
      consumer_did: tckParticipantDid(tckAddress),
      state: 'active',
    });
    const consumed = await api.get('/api/v1/agreements/ATPC0306');
    expect(consumed.body).to.include({ role: 'consumer', provider_did: tckParticipantDid(tckAddress) });
    const negotiation = await api.get(
      `/api/v1/negotiations/${encodeURIComponent(consumed.body.negotiation_id)}`,
    );
    expect(negotiation.body).to.include({ state: 'FINALIZED', counterparty_address: tckAddress });
  });

  it('seeds stepwise offers where the scripts decide each move (negotiations and the ATP agreements), automatic elsewhere', async () => {
    const api = client(connector.url, connector.initialAdminKey!);
    for (const [offer, approval] of [
      ['CD123:ACN0101:456', 'stepwise'],
      ['CD123:ACN0304:456', 'stepwise'],
      // The offer behind the seeded agreements: a provider transfer waits for the script's start.
      ['CD123:CAT0101:456', 'stepwise'],
      ['CD123:CAT0102:456', 'automatic'],
    ]) {
      const res = await api.get(`/api/v1/offers/${encodeURIComponent(offer!)}`);
      expect(res.status, offer).to.equal(200);
      expect(res.body.approval, offer).to.equal(approval);
    }
  });

  it('refuses webhook calls without the TCK Authorization value', async () => {
    const res = await client(connector.url).post(NEGOTIATION_WEBHOOK, {}, { authorization: 'Bearer nope' });
    expect(res.status).to.equal(401);
    expect(res.body).to.deep.equal({
      error: { code: 'unauthenticated', message: 'only the TCK may call its webhooks' },
    });
  });

  it('refuses malformed webhook calls and unknown providers', async () => {
    const hooks = client(connector.url);
    const missing = await hooks.post(NEGOTIATION_WEBHOOK, { providerId: 'TCK_PARTICIPANT' }, asTck);
    expect(missing.status).to.equal(400);
    expect(missing.body.error).to.deep.equal({ code: 'invalid_request', message: '"offerId" is required' });
    const stranger = await hooks.post(
      NEGOTIATION_WEBHOOK,
      { providerId: 'SOMEONE', offerId: 'o', datasetId: 'd', connectorAddress: tckAddress },
      asTck,
    );
    expect(stranger.status).to.equal(400);
    expect(stranger.body.error).to.deep.equal({
      code: 'invalid_request',
      message: 'unknown provider SOMEONE',
    });
    const elsewhere = await hooks.post(
      TRANSFER_WEBHOOK,
      {
        providerId: 'TCK_PARTICIPANT',
        agreementId: 'ATPC0101',
        format: 'HttpData-PULL',
        connectorAddress: 'http://127.0.0.1:1',
      },
      asTck,
    );
    expect(elsewhere.status).to.equal(400);
    expect(elsewhere.body.error).to.deep.equal({
      code: 'invalid_request',
      message: `the TCK is at ${tckAddress}, not http://127.0.0.1:1`,
    });
    const notJson = await hooks.call('POST', NEGOTIATION_WEBHOOK, '{', {
      ...asTck,
      'content-type': 'application/json',
    });
    expect(notJson.status).to.equal(400);
    expect(notJson.body.error.code).to.equal('invalid_request');
  });

  it('starts a negotiation as consumer on the webhook, offering back exactly the offer id it was given', async () => {
    const res = await client(connector.url).post(
      NEGOTIATION_WEBHOOK,
      {
        providerId: 'TCK_PARTICIPANT',
        offerId: 'offerACNC0101',
        datasetId: 'ACNC0101',
        connectorAddress: tckAddress,
      },
      asTck,
    );
    expect(res.status).to.equal(201);
    expect(res.body).to.include({
      role: 'consumer',
      dataset_id: 'ACNC0101',
      counterparty_did: tckParticipantDid(tckAddress),
    });
    const deadline = Date.now() + 15_000;
    while (!tck.received.some((m) => m.path === '/negotiations/request') && Date.now() < deadline)
      await new Promise((r) => setTimeout(r, 25));
    const request = tck.received.find((m) => m.path === '/negotiations/request')!;
    expect(request.body).to.include({
      '@type': 'ContractRequestMessage',
      consumerPid: res.body.consumer_pid,
    });
    expect(request.body.offer).to.deep.include({
      '@id': 'offerACNC0101',
      '@type': 'Offer',
      target: 'ACNC0101',
    });
    // Our own connector token, as to any peer: the profile changes nothing outbound.
    expect(request.authorization).to.match(/^Bearer [\w-]+\.[\w-]+\.[\w-]+$/);
  });
  it('starts consumer negotiations stepwise, taking an agreement the TCK signs with its participant id', async () => {
    const hooks = client(connector.url);
    // ACNC0201 has no scripted step: nothing but the TCK moves this negotiation.
    const res = await hooks.post(
      NEGOTIATION_WEBHOOK,
      {
        providerId: 'TCK_PARTICIPANT',
        offerId: 'CD123:ACNC0201:456',
        datasetId: 'ACNC0201',
        connectorAddress: tckAddress,
      },
      asTck,
    );
    expect(res.status, JSON.stringify(res.body)).to.equal(201);
    const api = client(connector.url, connector.initialAdminKey!);
    const negotiation = `/api/v1/negotiations/${encodeURIComponent(res.body.id)}`;
    const deadline = Date.now() + 15_000;
    while ((await api.get(negotiation)).body.state !== 'REQUESTED' && Date.now() < deadline)
      await new Promise((r) => setTimeout(r, 25));
    const agreed = await dsp().post(
      `/negotiations/${encodeURIComponent(res.body.consumer_pid)}/agreement`,
      {
        '@context': [DSP_CONTEXT_URL],
        '@type': 'ContractAgreementMessage',
        providerPid: 'urn:uuid:tck-provider-pid',
        consumerPid: res.body.consumer_pid,
        agreement: {
          '@id': 'urn:uuid:tck-agreement-acnc0201',
          '@type': 'Agreement',
          target: 'ACNC0201',
          assigner: 'TCK_PARTICIPANT',
          assignee: connector.identity.did,
          timestamp: new Date().toISOString(),
          permission: [{ action: 'use' }],
        },
      },
      asTck,
    );
    expect(agreed.status, JSON.stringify(agreed.body)).to.equal(200);
    expect(agreed.body).to.include({ '@type': 'ContractNegotiation', state: 'AGREED' });
    // The assigner check passed (no agreement_mismatch) and our verification waits for the script.
    let held = (await api.get(negotiation)).body;
    while (held.state === 'AGREED' && held.approval !== 'pending' && Date.now() < deadline) {
      await new Promise((r) => setTimeout(r, 25));
      held = (await api.get(negotiation)).body;
    }
    expect(held).to.include({ state: 'AGREED', approval: 'pending', error: null });
    expect(held.history.at(-1).note).to.equal('awaiting approval to verify the agreement');
  });
});

describe('a connector without the TCK profile', function () {
  this.timeout(60_000);
  let connector: Awaited<ReturnType<typeof startTestConnector>>;
  before(async () => {
    connector = await startTestConnector({ name: 'notck' });
  });
  after(() => connector?.stop());

  it('has no webhooks and refuses a TCK-style Authorization value', async () => {
    const hook = await client(connector.url).post(
      NEGOTIATION_WEBHOOK,
      {},
      { authorization: 'TCK anything-at-all-here' },
    );
    expect(hook.status).to.equal(404);
    expect(hook.body.error.code).to.equal('not_found');
    const res = await client(`${connector.url}/dsp`).post(
      '/catalog/request',
      { '@context': [DSP_CONTEXT_URL], '@type': 'CatalogRequestMessage' },
      { authorization: 'TCK anything-at-all-here' },
    );
    expect(res.status).to.equal(401);
    expect(res.body.code).to.equal('missing_token');
  });
});
