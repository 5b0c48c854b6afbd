/**
 * The consumer gateway end to end: a negotiation with a connection alias starts its transfer
 * by itself, an application with a gateway key reads Soda Hall through
 * `/gateway/{alias}/v1/...` on the consumer, forwarded to the provider's data plane and the
 * sample backend. Every gateway row of the spec's error table, and API key scopes.
 */
import { expect } from 'chai';
import { client, type Client } from '../support/http.js';
import { expectError } from '../support/expect-error.js';
import { startDataspace, startParticipant, type Participant } from '../support/dataspace.js';
import { startBuildingBackend, type RunningBuildingBackend } from '../../dev/building-backend/index.js';
import type { RunningAuthority } from '../../dev/authority/index.js';
import { POINTS, RICE, SODA, expectGatewayError, negotiateAgreement, publishBuildings } from './fixtures.js';

// eslint-disable-next-line @typescript-eslint/no-explicit-any -- tests read answers of every shape
type Json = any;

describe('consumer gateway', function () {
  this.timeout(180_000);
  let authority: RunningAuthority;
  let sample: RunningBuildingBackend;
  let keyed: RunningBuildingBackend;
  let provider: Participant;
  let consumer: Participant;
  let providerStopped = false;
  /** Application keys (gateway scope) and their ids. */
  const apps: Record<string, { id: string; key: string; gw: Client }> = {};

  async function waitConnection(alias: string, done: (c: Json) => boolean, ms = 20_000): Promise<Json> {
    const deadline = Date.now() + ms;
    for (;;) {
      const res = await consumer.api.get(`/api/v1/connections/${alias}`);
      if (res.status === 200 && done(res.body)) return res.body;
      if (Date.now() > deadline)
        throw new Error(`connection ${alias} did not get there: ${JSON.stringify(res.body)}`);
      await new Promise((r) => setTimeout(r, 25));
    }
  }

  async function gatewayKey(name: string) {
    const res = await consumer.api.post('/api/v1/api-keys', { name, scope: 'gateway' });
    expect(res.status, JSON.stringify(res.body)).to.equal(201);
    return {
      id: res.body.id as string,
      key: res.body.key as string,
      gw: client(`${consumer.connector.url}/gateway`, res.body.key),
    };
  }

  const allow = async (alias: string, app: { id: string }, access: 'read' | 'read_write') => {
    const res = await consumer.api.put(`/api/v1/connections/${alias}/apps/${app.id}`, { access });
    expect(res.status, JSON.stringify(res.body)).to.equal(200);
  };

  before(async () => {
    ({ authority, backend: sample } = await startDataspace());
    keyed = await startBuildingBackend({ keys: { 'key-soda': ['soda-hall'], 'key-rice': ['rice-hall'] } });
    provider = await startParticipant('gw-provider', authority);
    consumer = await startParticipant('gw-consumer', authority);
    await publishBuildings(provider, keyed.url, 'gw');

    await negotiateAgreement(consumer, provider, 'gw-both-write', { connection_alias: 'campus' });
    await negotiateAgreement(consumer, provider, 'gw-some-write', { connection_alias: 'some' });
    await waitConnection('campus', (c) => c.transfer_state === 'STARTED');
    await waitConnection('some', (c) => c.transfer_state === 'STARTED');

    apps.reader = await gatewayKey('dashboard');
    apps.writer = await gatewayKey('optimiser');
    apps.stranger = await gatewayKey('not allowed anywhere');
    await allow('campus', apps.reader, 'read');
    await allow('some', apps.reader, 'read');
    await allow('campus', apps.writer, 'read_write');
    await allow('some', apps.writer, 'read_write');
  });
  after(async () => {
    await consumer?.connector.stop();
    if (!providerStopped) await provider?.connector.stop();
    await Promise.all([sample?.close(), keyed?.close(), authority?.close()]);
  });

  describe('API key scopes', () => {
    it('creates gateway keys without a role; management keys still need one', async () => {
      const created = await consumer.api.post('/api/v1/api-keys', { name: 'an app', scope: 'gateway' });
      expect(created.status).to.equal(201);
      expect(created.body).to.include({ scope: 'gateway', role: 'viewer' });
      const listed = await consumer.api.get('/api/v1/api-keys?limit=200');
      expect(listed.body.items.find((k: { id: string }) => k.id === created.body.id)).to.include({
        scope: 'gateway',
      });
      const management = await consumer.api.post('/api/v1/api-keys', { name: 'ops', role: 'operator' });
      expect(management.body).to.include({ scope: 'management', role: 'operator' });
      expectError(
        await consumer.api.post('/api/v1/api-keys', { name: 'no role' }),
        400,
        'invalid_request',
        'role',
      );
      expectError(
        await consumer.api.post('/api/v1/api-keys', { name: 'odd', role: 'viewer', scope: 'everything' }),
        400,
        'invalid_request',
        'scope',
      );
    });

    it('a gateway key on /api/v1 and a management key on /gateway are forbidden', async () => {
      expectError(
        await client(consumer.connector.url, apps.reader!.key).get('/api/v1/sources'),
        403,
        'forbidden',
      );
      const admin = client(`${consumer.connector.url}/gateway`, consumer.connector.adminKey);
      expectGatewayError(await admin.get(`/campus/v1/buildings/${SODA}/points`), 403, 'forbidden', {
        buildingId: SODA,
        origin: 'gateway',
        retryable: false,
      });
    });
  });

  describe('reading a building', () => {
    it('reads the points of Soda Hall through the connection, filters applied by the data plane', async () => {
      const res = await apps.reader!.gw.get(
        `/campus/v1/buildings/${SODA}/points?class=brick:Temperature_Sensor&include=equipment`,
      );
      expect(res.status, JSON.stringify(res.body).slice(0, 300)).to.equal(200);
      expect(res.headers.get('content-type')).to.match(/^application\/json/);
      expect(res.body).to.have.keys('platform_version', 'building_id', 'generated_at', 'points', 'equipment');
      expect(res.body.platform_version).to.match(/^1\.\d+$/);
      expect(res.body.building_id).to.equal(SODA);
      expect(res.body.points.length).to.be.greaterThan(10);
      expect(
        res.body.points.every((p: { class: string }) => p.class.endsWith('Temperature_Sensor')),
      ).to.equal(true);

      const rice = await apps.reader!.gw.get(`/campus/v1/buildings/${RICE}/points?access=write`);
      expect(rice.status).to.equal(200);
      expect(rice.body.building_id).to.equal(RICE);
    });

    it('reads current values with max_age; every requested point lands in one list', async () => {
      const ids = [POINTS.energy, POINTS.stale, 'no-such-point'];
      const res = await apps.reader!.gw.get(
        `/campus/v1/buildings/${SODA}/points/values?point_ids=${ids.join(',')}&max_age=PT15M`,
      );
      expect(res.status).to.equal(200);
      expect(res.body.readings.map((r: { point_id: string }) => r.point_id)).to.deep.equal([POINTS.energy]);
      expect(res.body.unavailable).to.deep.equal([
        { point_id: POINTS.stale, reason: 'too_stale' },
        { point_id: 'no-such-point', reason: 'not_found' },
      ]);
    });

    it("passes the data plane's refusals on in the same shape, marked as the data plane's", async () => {
      expectGatewayError(
        await apps.reader!.gw.get(`/campus/v1/buildings/${SODA}/points?class=brick:Unicorn`),
        400,
        'invalid_request',
        { target: 'class', origin: 'dataplane', buildingId: SODA, retryable: false },
      );
      expectGatewayError(await apps.reader!.gw.get(`/some/v1/buildings/${RICE}/points`), 403, 'forbidden', {
        origin: 'dataplane',
        buildingId: RICE,
      });
      const some = await apps.reader!.gw.get(
        `/some/v1/buildings/${SODA}/points/values?point_ids=${POINTS.noData}`,
      );
      expect(some.body.unavailable).to.deep.equal([{ point_id: POINTS.noData, reason: 'forbidden' }]);
    });
  });

  describe('error rows of the spec', () => {
    it('unauthenticated: missing or unknown key', async () => {
      const anonymous = client(`${consumer.connector.url}/gateway`);
      expectGatewayError(await anonymous.get(`/campus/v1/buildings/${SODA}/points`), 401, 'unauthenticated', {
        buildingId: SODA,
        origin: 'gateway',
        retryable: false,
      });
      const unknown = client(`${consumer.connector.url}/gateway`, `plk_${'a'.repeat(12)}_${'0'.repeat(48)}`);
      expectGatewayError(await unknown.get(`/campus/v1/buildings/${SODA}/points`), 401, 'unauthenticated');
    });

    it('forbidden: app not allowed on the connection, unknown connection, read-only app writing', async () => {
      expectGatewayError(
        await apps.stranger!.gw.get(`/campus/v1/buildings/${SODA}/points`),
        403,
        'forbidden',
        {
          origin: 'gateway',
          message: /may not use connection 'campus'/,
        },
      );
      expectGatewayError(
        await apps.reader!.gw.get(`/nowhere/v1/buildings/${SODA}/points`),
        403,
        'forbidden',
        {
          message: /may not use connection 'nowhere'/,
        },
      );
      expectGatewayError(
        await apps.reader!.gw.post(`/campus/v1/buildings/${SODA}/setpoints`, {
          setpoints: [{ point_id: POINTS.occupancy, value: 2 }],
        }),
        403,
        'forbidden',
        { origin: 'gateway', message: /may only read/ },
      );
    });

    it('building_not_found for an unknown building, not_found for an unknown route', async () => {
      expectGatewayError(
        await apps.reader!.gw.get(`/campus/v1/buildings/0000.00.0000000000/points`),
        404,
        'building_not_found',
        {
          buildingId: '0000.00.0000000000',
          origin: 'dataplane',
        },
      );
      expectGatewayError(
        await apps.reader!.gw.get(`/campus/v1/buildings/${SODA}/equipment`),
        404,
        'not_found',
        {
          buildingId: SODA,
          origin: 'gateway',
        },
      );
      expectGatewayError(await apps.reader!.gw.get(`/campus/v2/buildings/${SODA}/points`), 404, 'not_found', {
        buildingId: null,
      });
      expectGatewayError(
        await apps.reader!.gw.get(`/campus/v1/buildings/${SODA}/points%2Fvalues`),
        404,
        'not_found',
      );
    });
  });

  describe('writing', () => {
    it('a read-write app writes a setpoint; a backend refusal comes back with its code', async () => {
      const ok = await apps.writer!.gw.post(`/campus/v1/buildings/${SODA}/setpoints`, {
        setpoints: [{ point_id: POINTS.occupancy, value: 3 }],
      });
      expect(ok.status, JSON.stringify(ok.body)).to.equal(200);
      expect(ok.body).to.include({ building_id: SODA });
      expect(ok.body.accepted[0]).to.include({ point_id: POINTS.occupancy, value: 3 });

      expectGatewayError(
        await apps.writer!.gw.post(`/campus/v1/buildings/${SODA}/setpoints`, {
          setpoints: [{ point_id: POINTS.occupancy, value: 9 }],
        }),
        422,
        'value_out_of_range',
        { origin: 'backend', target: 'setpoints[0].value', buildingId: SODA, retryable: false },
      );
      expectGatewayError(
        await apps.writer!.gw.post(`/some/v1/buildings/${SODA}/setpoints`, {
          setpoints: [{ point_id: 'fan_speed_reset_exhaust_fan_E12', value: 50 }],
        }),
        403,
        'forbidden',
        { origin: 'dataplane', target: 'setpoints[0].point_id' },
      );
    });
  });

  describe('access taken away on the very next request, although the checks are cached', () => {
    // Each step reads first, so that the key, the app's access and the route are in the
    // gateway's caches (gateway/access-cache.ts) when the change comes.
    const read = (app: { gw: Client }) =>
      app.gw.get(`/campus/v1/buildings/${SODA}/points?point_ids=${POINTS.energy}`);
    const write = (app: { gw: Client }) =>
      app.gw.post(`/campus/v1/buildings/${SODA}/setpoints`, {
        setpoints: [{ point_id: POINTS.occupancy, value: 2 }],
      });

    it('an app downgraded to read-only may not write; a removed app may not read', async () => {
      const app = await gatewayKey('short-lived optimiser');
      await allow('campus', app, 'read_write');
      expect((await read(app)).status).to.equal(200);
      expect((await write(app)).status).to.equal(200);

      await allow('campus', app, 'read');
      expectGatewayError(await write(app), 403, 'forbidden', {
        origin: 'gateway',
        buildingId: SODA,
        retryable: false,
        message: /may only read through connection 'campus'/,
      });
      expect((await read(app)).status).to.equal(200);

      const removed = await consumer.api.delete(`/api/v1/connections/campus/apps/${app.id}`);
      expect(removed.status, JSON.stringify(removed.body)).to.equal(200);
      expectGatewayError(await read(app), 403, 'forbidden', {
        origin: 'gateway',
        buildingId: SODA,
        message: /may not use connection 'campus'/,
      });
    });

    it('a revoked key is unauthenticated', async () => {
      const app = await gatewayKey('revoked soon');
      await allow('campus', app, 'read');
      expect((await read(app)).status).to.equal(200);
      const revoked = await consumer.api.delete(`/api/v1/api-keys/${app.id}`);
      expect(revoked.status, JSON.stringify(revoked.body)).to.equal(200);
      expectGatewayError(await read(app), 401, 'unauthenticated', {
        origin: 'gateway',
        buildingId: SODA,
        retryable: false,
      });
    });
  });

  describe('connections that are not active', () => {
    it('a suspended transfer: upstream_unavailable, retryable; resumed, it works again', async () => {
      const connection = (await consumer.api.get('/api/v1/connections/campus')).body;
      const suspend = await consumer.api.post(
        `/api/v1/transfers/${encodeURIComponent(connection.transfer_id)}/suspend`,
      );
      expect(suspend.status, JSON.stringify(suspend.body)).to.equal(200);
      const res = await apps.reader!.gw.get(`/campus/v1/buildings/${SODA}/points`);
      expectGatewayError(res, 503, 'upstream_unavailable', {
        retryable: true,
        origin: 'gateway',
        buildingId: SODA,
        message: /not active \(its transfer is SUSPENDED\)/,
      });
      const resume = await consumer.api.post(
        `/api/v1/transfers/${encodeURIComponent(connection.transfer_id)}/resume`,
      );
      expect(resume.status, JSON.stringify(resume.body)).to.equal(200);
      await waitConnection('campus', (c) => c.transfer_state === 'STARTED');
      const deadline = Date.now() + 20_000;
      let again = await apps.reader!.gw.get(`/campus/v1/buildings/${SODA}/points?point_ids=${POINTS.energy}`);
      while (again.status !== 200 && Date.now() < deadline) {
        await new Promise((r) => setTimeout(r, 50));
        again = await apps.reader!.gw.get(`/campus/v1/buildings/${SODA}/points?point_ids=${POINTS.energy}`);
      }
      expect(again.status, JSON.stringify(again.body)).to.equal(200);
    });

    it('a connection whose negotiation is not finalized yet: upstream_unavailable, retryable', async () => {
      const manual = await provider.api.post('/api/v1/offers', {
        id: 'gw-manual',
        asset_id: 'gw-both',
        access_policy_id: 'gw-members',
        contract_policy_id: 'gw-read',
        approval: 'manual',
      });
      expect(manual.status).to.equal(201);
      const started = await consumer.api.post('/api/v1/negotiations', {
        counterparty_address: provider.dsp,
        counterparty_did: provider.did,
        offer_id: 'gw-manual',
        connection_alias: 'pending',
      });
      expect(started.status).to.equal(201);
      await waitConnection('pending', () => true);
      await allow('pending', apps.reader!, 'read');
      expectGatewayError(
        await apps.reader!.gw.get(`/pending/v1/buildings/${SODA}/points`),
        503,
        'upstream_unavailable',
        {
          retryable: true,
          origin: 'gateway',
          message: /not active \(it has no transfer yet\)/,
        },
      );
    });

    it("the provider's data plane unreachable: upstream_unavailable, retryable", async () => {
      await provider.connector.stop();
      providerStopped = true;
      expectGatewayError(
        await apps.reader!.gw.get(`/campus/v1/buildings/${SODA}/points`),
        503,
        'upstream_unavailable',
        {
          retryable: true,
          origin: 'gateway',
          message: /data plane refused the connection|could not be reached/,
        },
      );
    });
  });
});
