/**
 * The data the TCK expects (its sample properties, and EDC's DataSeed for the same suite):
 * datasets CAT0101, CAT0102 and ACN0101–ACN0304, each offered as `CD123:<dataset>:456`; and
 * finalized agreements ATP* (we provide, the TCK consumes) and ATPC* (the TCK provides, we
 * consume). Datasets and offers go through the management API like an operator's; the
 * agreements have no API (they only ever come out of a negotiation), so each is written with
 * the finalized negotiation it came out of (which holds the TCK's address), through the same
 * stores a negotiation's activities write to.
 */
import type { Db } from '../../db/knex.js';
import { agreementStore } from '../../db/agreements.js';
import { negotiationStore } from '../../db/negotiations.js';
import type { Operator } from './operator.js';
import { PROVIDER_SCRIPTS } from './scripts.js';

export const CATALOG_DATASETS = ['CAT0101', 'CAT0102'];
export const NEGOTIATION_DATASETS = [
  ...['01', '02', '03', '04'].map((n) => `ACN01${n}`),
  ...['01', '02', '03', '04', '05', '06', '07'].map((n) => `ACN02${n}`),
  ...['01', '02', '03', '04'].map((n) => `ACN03${n}`),
];
export const offerIdOf = (datasetId: string) => `CD123:${datasetId}:456`;

export const PROVIDER_AGREEMENTS = [
  ...['01', '02', '03', '04', '05'].map((n) => `ATP01${n}`),
  ...['01', '02', '03', '04', '05'].map((n) => `ATP02${n}`),
  ...['01', '02', '03', '04', '05', '06'].map((n) => `ATP03${n}`),
];
export const CONSUMER_AGREEMENTS = PROVIDER_AGREEMENTS.map((id) => id.replace('ATP', 'ATPC'));

/** A building of the sample backend that the seeded products publish. */
const OBJECT = '0363.10.0000000101';
const POLICY = 'tck-use';
const SOURCE = 'tck-source';
/** The dataset the seeded agreements are about (a transfer needs a product behind it). */
export const AGREEMENT_DATASET = CATALOG_DATASETS[0]!;

export async function seedDatasets(operator: Operator, backend: { url: string; key: string }) {
  const created = [201, 409];
  await operator.expect(
    'POST',
    '/api/v1/policies',
    { id: POLICY, title: 'TCK: use', permissions: [{ action: 'use' }] },
    created,
  );
  await operator.expect(
    'POST',
    '/api/v1/sources',
    {
      id: SOURCE,
      name: 'TCK source',
      objects: [OBJECT],
      backend: {
        base_url: backend.url,
        auth_header_name: 'X-Api-Key',
        auth_header_value: backend.key,
        allowed_methods: ['GET'],
      },
      links: [{ object: OBJECT, local_id: 'soda-hall' }],
    },
    created,
  );
  for (const id of [...CATALOG_DATASETS, ...NEGOTIATION_DATASETS]) {
    await operator.expect(
      'POST',
      '/api/v1/products',
      { id, title: `TCK dataset ${id}`, objects: [OBJECT], source_id: SOURCE },
      created,
    );
    await operator.expect(
      'POST',
      '/api/v1/offers',
      {
        id: offerIdOf(id),
        asset_id: id,
        access_policy_id: POLICY,
        contract_policy_id: POLICY,
        // Scripted datasets wait for the profile before each of our moves, as for an operator's
        // decision; so does the first start of every transfer under the seeded agreements.
        approval: id in PROVIDER_SCRIPTS || id === AGREEMENT_DATASET ? 'stepwise' : 'automatic',
      },
      created,
    );
  }
}

export async function seedAgreements(db: Db, ours: { did: string }, tck: { did: string; address: string }) {
  const signedAt = new Date().toISOString();
  const agreement = (id: string, provider: string, consumer: string) => ({
    '@id': id,
    '@type': 'Agreement',
    target: AGREEMENT_DATASET,
    assigner: provider,
    assignee: consumer,
    timestamp: signedAt,
    permission: [{ action: 'use' }],
  });
  for (const [ids, role, provider, consumer] of [
    [PROVIDER_AGREEMENTS, 'provider', ours.did, tck.did],
    [CONSUMER_AGREEMENTS, 'consumer', tck.did, ours.did],
  ] as const) {
    for (const id of ids) {
      const negotiationId = `urn:tck-seed:${id}`;
      await negotiationStore(db).record(
        {
          id: negotiationId,
          workflow_id: negotiationId,
          role,
          state: 'FINALIZED',
          consumer_pid: role === 'consumer' ? negotiationId : `urn:tck-seed:consumer:${id}`,
          provider_pid: role === 'provider' ? negotiationId : `urn:tck-seed:provider:${id}`,
          counterparty_did: tck.did,
          counterparty_address: tck.address,
          dataset_id: AGREEMENT_DATASET,
          offer_id: offerIdOf(AGREEMENT_DATASET),
          agreement_id: id,
          purpose: null,
          offer: { '@id': offerIdOf(AGREEMENT_DATASET), '@type': 'Offer', permission: [{ action: 'use' }] },
          connection_alias: null,
          error: null,
          approval: null,
          expires_at: null,
          decided_by: null,
          decided_at: null,
          narrowing: null,
          version: 1,
        },
        {
          at: signedAt,
          state: 'FINALIZED',
          message_type: null,
          direction: 'internal',
          evidence_id: null,
          note: 'seeded for the DSP TCK',
        },
      );
      await agreementStore(db).insert({
        id,
        negotiation_id: negotiationId,
        role,
        provider_did: provider,
        consumer_did: consumer,
        dataset_id: AGREEMENT_DATASET,
        offer_id: offerIdOf(AGREEMENT_DATASET),
        agreement: agreement(id, provider, consumer),
        narrowing: null,
        connection_alias: null,
        signed_at: signedAt,
      });
    }
  }
}
