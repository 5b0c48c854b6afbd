/**
 * Shared pieces of the gateway and data plane suites: a provider publishing two real Brick
 * buildings (Soda Hall, Rice Hall) from the sample backend with per-building keys and local
 * ids, agreements made by real negotiations, and the ErrorResponse assertion.
 */
import { expect } from 'chai';
import type { Answer } from '../support/http.js';
import { waitFor, type Participant } from '../support/dataspace.js';
import { parseDurationMs } from '../../domain/duration.js';

export const SODA = '0363.10.0000000101';
export const RICE = '0363.10.0000000202';

/** Asserts the spec's gateway ErrorResponse: status, code, shape, retry hints and who refused. */
export function expectGatewayError(
  answer: Answer,
  status: number,
  code: string,
  expected: {
    retryable?: boolean;
    buildingId?: string | null;
    target?: string;
    origin?: 'gateway' | 'dataplane' | 'backend';
    message?: RegExp;
  } = {},
): void {
  expect(answer.status, JSON.stringify(answer.body)).to.equal(status);
  const body = answer.body;
  expect(body).to.be.an('object');
  expect(Object.keys(body)).to.satisfy((keys: string[]) =>
    keys.every((k) => ['platform_version', 'building_id', 'error'].includes(k)),
  );
  expect(body.platform_version).to.match(/^1\.\d+$/);
  expect(body.error.code).to.equal(code);
  expect(body.error.message).to.be.a('string').and.not.empty;
  expect(body.error.message).not.to.match(/\n\s+at /);
  expect(body.error.retryable).to.be.a('boolean');
  if (expected.retryable !== undefined) expect(body.error.retryable).to.equal(expected.retryable);
  if (body.error.retryable) {
    expect(parseDurationMs(body.error.retry_after), 'retry_after on every retryable error').to.be.a('number');
    expect(Number(answer.headers.get('retry-after'))).to.be.greaterThan(0);
  } else {
    expect(body.error).not.to.have.property('retry_after');
  }
  if (expected.buildingId === null) expect(body).not.to.have.property('building_id');
  else if (expected.buildingId !== undefined) expect(body.building_id).to.equal(expected.buildingId);
  if (expected.target !== undefined) expect(body.error.target).to.equal(expected.target);
  if (expected.origin) expect(answer.headers.get('pl-error-origin')).to.equal(expected.origin);
  if (expected.message) expect(body.error.message).to.match(expected.message);
}

/** Negotiates an offer to FINALIZED (consumer side) and returns the agreement id. */
export async function negotiateAgreement(
  consumer: Participant,
  provider: Participant,
  offerId: string,
  extra: Record<string, unknown> = {},
): Promise<string> {
  const started = await consumer.api.post('/api/v1/negotiations', {
    counterparty_address: provider.dsp,
    counterparty_did: provider.did,
    offer_id: offerId,
    ...extra,
  });
  expect(started.status, JSON.stringify(started.body)).to.equal(201);
  const done = await waitFor(
    consumer.api,
    started.body.id,
    (n) => n.state === 'FINALIZED' || n.state === 'TERMINATED',
  );
  expect(done.state, JSON.stringify(done)).to.equal('FINALIZED');
  return done.agreement_id as string;
}

/** Sets up sources, policies, products and offers on the provider for the suites. */
export async function publishBuildings(provider: Participant, backendUrl: string, prefix: string) {
  const api = provider.api;
  const ok = async (p: Promise<Answer>) => {
    const a = await p;
    expect(a.status, JSON.stringify(a.body)).to.be.oneOf([200, 201]);
    return a.body;
  };
  // The system key is wrong on purpose: each building is reached with its own key only.
  await ok(
    api.post('/api/v1/sources', {
      id: `${prefix}-campus`,
      name: `${prefix} campus`,
      objects: [SODA, RICE],
      backend: {
        base_url: backendUrl,
        auth_header_name: 'X-Api-Key',
        auth_header_value: 'not-a-key',
        allowed_methods: ['GET', 'POST'],
      },
      links: [
        { object: SODA, local_id: 'soda-hall', auth_header_value: 'key-soda' },
        { object: RICE, local_id: 'rice-hall', auth_header_value: 'key-rice' },
      ],
    }),
  );
  await ok(
    api.post('/api/v1/policies', {
      id: `${prefix}-members`,
      permissions: [
        {
          action: 'use',
          constraints: [{ left_operand: 'pl:membership', operator: 'eq', right_operand: 'active' }],
        },
      ],
    }),
  );
  await ok(api.post('/api/v1/policies', { id: `${prefix}-read`, permissions: [{ action: 'read' }] }));
  await ok(
    api.post('/api/v1/policies', {
      id: `${prefix}-write`,
      permissions: [{ action: 'read' }, { action: 'write' }],
    }),
  );
  const product = (id: string, body: Record<string, unknown>) =>
    ok(api.post('/api/v1/products', { id, title: id, source_id: `${prefix}-campus`, ...body }));
  const offer = (id: string, asset: string, policy: string) =>
    ok(
      api.post('/api/v1/offers', {
        id,
        asset_id: asset,
        access_policy_id: `${prefix}-members`,
        contract_policy_id: policy,
        approval: 'automatic',
      }),
    );
  await product(`${prefix}-both`, { objects: [SODA, RICE] });
  await product(`${prefix}-some`, {
    objects: [SODA],
    selection: { kind: 'points' },
    points: SOME_POINTS,
  });
  await offer(`${prefix}-both-read`, `${prefix}-both`, `${prefix}-read`);
  await offer(`${prefix}-both-write`, `${prefix}-both`, `${prefix}-write`);
  await offer(`${prefix}-some-write`, `${prefix}-some`, `${prefix}-write`);
}

/** Points of Soda Hall the tests rely on (the sample backend's values are deterministic per id). */
export const POINTS = {
  /** read_write integer 1..3, step 1, on AHU A1 */
  occupancy: 'ahu_occpy_SODA1____OCCPY',
  /** read, live, cumulative energy meter, flow_direction consumption */
  energy: 'energy_meter_building_SOD__BLD_1_KWH',
  /** read, its reading is two hours old (quality stale) */
  stale: 'c_water_vlv_press_supply_fan_S11',
  /** read, the backend never has a value */
  noData: 'flow_sensor_hvac_zone_C700D',
  /** write-only command */
  writeOnly: 'curtl_SODA2____CURTL',
} as const;

/** The narrow product: three points of Soda Hall. */
export const SOME_POINTS = [POINTS.occupancy, POINTS.energy, POINTS.stale];

/**
 * A signed-request offer of both buildings (`pl:signedRequests eq true`) next to those of
 * publishBuildings (which it needs: the source and the members policy).
 */
export async function publishSignedOffer(provider: Participant, prefix: string): Promise<string> {
  const api = provider.api;
  const ok = async (p: Promise<Answer>) => {
    const a = await p;
    expect(a.status, JSON.stringify(a.body)).to.be.oneOf([200, 201]);
  };
  await ok(
    api.post('/api/v1/policies', {
      id: `${prefix}-signed`,
      permissions: [
        {
          action: 'read',
          constraints: [{ left_operand: 'pl:signedRequests', operator: 'eq', right_operand: true }],
        },
      ],
    }),
  );
  await ok(
    api.post('/api/v1/offers', {
      id: `${prefix}-both-signed`,
      asset_id: `${prefix}-both`,
      access_policy_id: `${prefix}-members`,
      contract_policy_id: `${prefix}-signed`,
      approval: 'automatic',
    }),
  );
  return `${prefix}-both-signed`;
}
