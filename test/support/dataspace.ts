/**
 * Two (or more) connectors that know each other: each on its own port with a did:web DID on
 * loopback, members of one authority stand-in, and a sample building backend for products.
 */
import { expect } from 'chai';
import { startTestConnector, type TestConnector } from './stack.js';
import { client, type Client } from './http.js';
import { freePort } from '../../dev/processes.js';
import { startAuthority, type RunningAuthority } from '../../dev/authority/index.js';
import { startBuildingBackend, type RunningBuildingBackend } from '../../dev/building-backend/index.js';

export interface Participant {
  connector: TestConnector;
  api: Client;
  did: string;
  dsp: string;
}

export async function startParticipant(
  name: string,
  authority: RunningAuthority,
  env: Record<string, string> = {},
  member = true,
): Promise<Participant> {
  const port = await freePort();
  const connector = await startTestConnector({
    name,
    env: {
      PORT: String(port),
      PUBLIC_URL: `http://127.0.0.1:${port}`,
      DID_WEB_ALLOW_HTTP: 'true',
      AUTHORITY_URL: authority.url,
      ...env,
    },
  });
  const did = connector.identity.did;
  if (member) authority.upsert({ did, name, roles: ['researcher'], active: true });
  return { connector, api: client(connector.url, connector.adminKey), did, dsp: `${connector.url}/dsp` };
}

export const SODA = '0363.10.0000000101';

/** A provider with a source on the sample backend, a product, policies and an offer. */
export async function publishOffer(
  provider: Participant,
  backend: RunningBuildingBackend,
  approval: 'automatic' | 'manual',
  id: string,
) {
  const api = provider.api;
  if ((await api.get('/api/v1/sources/campus')).status === 404) {
    expect(
      (
        await api.post('/api/v1/sources', {
          id: 'campus',
          name: 'Campus',
          objects: [SODA],
          backend: {
            base_url: backend.url,
            auth_header_name: 'X-Api-Key',
            auth_header_value: 'k',
            allowed_methods: ['GET'],
          },
          links: [{ object: SODA, local_id: 'soda-hall' }],
        })
      ).status,
    ).to.equal(201);
    expect(
      (
        await api.post('/api/v1/policies', {
          id: 'members',
          permissions: [
            {
              action: 'use',
              constraints: [{ left_operand: 'pl:membership', operator: 'eq', right_operand: 'active' }],
            },
          ],
        })
      ).status,
    ).to.equal(201);
    expect(
      (await api.post('/api/v1/policies', { id: 'read-only', permissions: [{ action: 'read' }] })).status,
    ).to.equal(201);
  }
  expect(
    (
      await api.post('/api/v1/products', {
        id: `product-${id}`,
        title: `Soda ${id}`,
        objects: [SODA],
        source_id: 'campus',
      })
    ).status,
  ).to.equal(201);
  const offer = await api.post('/api/v1/offers', {
    id,
    asset_id: `product-${id}`,
    access_policy_id: 'members',
    contract_policy_id: 'read-only',
    approval,
  });
  expect(offer.status).to.equal(201);
  return { offerId: id, datasetId: `product-${id}` };
}

/** Polls a negotiation until `done` holds (bounded); returns the last answer. */
// eslint-disable-next-line @typescript-eslint/no-explicit-any -- tests read negotiations of every shape
export async function waitFor(api: Client, id: string, done: (n: any) => boolean, ms = 15_000): Promise<any> {
  const deadline = Date.now() + ms;
  for (;;) {
    const res = await api.get(`/api/v1/negotiations/${encodeURIComponent(id)}`);
    if (res.status === 200 && done(res.body)) return res.body;
    if (Date.now() > deadline)
      throw new Error(`negotiation ${id} did not get there: ${JSON.stringify(res.body)}`);
    await new Promise((r) => setTimeout(r, 25));
  }
}

export async function startDataspace() {
  const authority = await startAuthority();
  const backend = await startBuildingBackend({ keys: { k: '*' } });
  return { authority, backend };
}
