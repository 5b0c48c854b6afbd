/**
 * POST /api/v1/catalog/request: an operator reads a counterparty's catalog through its own
 * connector (DSP catalog request with our connector token), two connectors over loopback.
 */
import { expect } from 'chai';
import { expectError } from '../support/expect-error.js';
import {
  publishOffer,
  startDataspace,
  startParticipant,
  SODA,
  type Participant,
} from '../support/dataspace.js';
import { freePort } from '../../dev/processes.js';
import type { RunningAuthority } from '../../dev/authority/index.js';
import type { RunningBuildingBackend } from '../../dev/building-backend/index.js';

describe("management: a counterparty's catalog", function () {
  this.timeout(120_000);
  let authority: RunningAuthority;
  let backend: RunningBuildingBackend;
  let provider: Participant;
  let consumer: Participant;

  before(async () => {
    ({ authority, backend } = await startDataspace());
    provider = await startParticipant('catalog-provider', authority);
    consumer = await startParticipant('catalog-consumer', authority);
    await publishOffer(provider, backend, 'automatic', 'cat-offer');
  });
  after(async () => {
    await consumer?.connector.stop();
    await provider?.connector.stop();
    await backend?.close();
    await authority?.close();
  });

  const ask = (body: Record<string, unknown>, api = consumer.api) =>
    api.post('/api/v1/catalog/request', body);

  it('answers the DSP catalog with the datasets and offer ids a negotiation needs', async () => {
    const res = await ask({ counterparty_address: provider.dsp, counterparty_did: provider.did });
    expect(res.status, JSON.stringify(res.body)).to.equal(200);
    expect(res.body).to.include({ counterparty_did: provider.did, counterparty_name: 'catalog-provider' });
    expect(res.body.datasets).to.deep.include({
      dataset_id: 'product-cat-offer',
      title: 'Soda cat-offer',
      building_id: SODA,
      offer_ids: ['cat-offer'],
    });
    expect(res.body.catalog['@type']).to.equal('Catalog');
    // What the summary names is what POST /api/v1/negotiations takes.
    const started = await consumer.api.post('/api/v1/negotiations', {
      counterparty_address: provider.dsp,
      counterparty_did: provider.did,
      offer_id: res.body.datasets[0].offer_ids[0],
      dataset_id: res.body.datasets[0].dataset_id,
    });
    expect(started.status, JSON.stringify(started.body)).to.equal(201);
  });

  it('refuses an address that is not on the DID’s host, or not a URL: invalid_request', async () => {
    expectError(
      await ask({ counterparty_address: 'http://10.0.0.1/dsp', counterparty_did: provider.did }),
      400,
      'invalid_request',
      'counterparty_address',
    );
    expectError(
      await ask({ counterparty_address: 'not a url', counterparty_did: provider.did }),
      400,
      'invalid_request',
      'counterparty_address',
    );
    expectError(
      await ask({ counterparty_address: provider.dsp }),
      400,
      'invalid_request',
      'counterparty_did',
    );
  });

  it('upstream_unavailable when nobody answers, and with the refusal when the counterparty refuses us', async () => {
    const port = await freePort();
    expectError(
      await ask({
        counterparty_address: `http://127.0.0.1:${port}/dsp`,
        counterparty_did: `did:web:127.0.0.1%3A${port}`,
      }),
      502,
      'upstream_unavailable',
      'connection refused',
    );
    authority.upsert({ did: consumer.did, name: 'catalog-consumer', roles: ['researcher'], active: false });
    try {
      // The provider caches a yes for up to a minute: ask a fresh provider.
      const other = await startParticipant('catalog-provider-2', authority);
      try {
        expectError(
          await ask({ counterparty_address: other.dsp, counterparty_did: other.did }),
          502,
          'upstream_unavailable',
          /answered 403/,
        );
      } finally {
        await other.connector.stop();
      }
    } finally {
      authority.upsert({ did: consumer.did, name: 'catalog-consumer', roles: ['researcher'], active: true });
    }
  });

  it('needs the operator role', async () => {
    const key = await consumer.api.post('/api/v1/api-keys', { name: 'viewer', role: 'viewer' });
    expect(key.status, JSON.stringify(key.body)).to.equal(201);
    const { client } = await import('../support/http.js');
    expectError(
      await ask(
        { counterparty_address: provider.dsp, counterparty_did: provider.did },
        client(consumer.connector.url, key.body.key),
      ),
      403,
      'forbidden',
    );
  });
});
