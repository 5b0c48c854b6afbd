/**
 * The provider data plane over HTTP: agreements made by real negotiations between two
 * connectors, tokens issued for them (gateway/dataplane/access.ts), the sample backend serving
 * Soda Hall and Rice Hall with per-building keys, and small loopback backends for the cap and
 * for answers that break the schema.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { expect } from 'chai';
import { client, type Client } from '../support/http.js';
import { startDataspace, startParticipant, type Participant } from '../support/dataspace.js';
import { startBuildingBackend, type RunningBuildingBackend } from '../../dev/building-backend/index.js';
import type { RunningAuthority } from '../../dev/authority/index.js';
import {
  endpointProperty,
  issueTransferAccess,
  refreshTransferToken,
  revokeTransferAccess,
  TokenRefreshError,
  type DataAddress,
} from '../../gateway/dataplane/access.js';
import { loadBrickClassIndex } from '../../gateway/brick/class-index.js';
import {
  POINTS,
  RICE,
  SODA,
  SOME_POINTS,
  expectGatewayError,
  negotiateAgreement,
  publishBuildings,
} from './fixtures.js';

const ODD = {
  huge: '0363.10.0000000901',
  chunked: '0363.10.0000000902',
  broken: '0363.10.0000000903',
  html: '0363.10.0000000904',
};
const NARROW = '0363.10.0000000905';
const MiB = 1024 * 1024;

/** A backend that misbehaves in the ways the data plane must contain. */
function startOddBackend(): Promise<{ url: string; close(): Promise<void> }> {
  const server = http.createServer((req, res) => {
    const local = /^\/v1\/buildings\/([^/]+)\//.exec(req.url ?? '')?.[1];
    if (local === 'huge') {
      res.writeHead(200, { 'content-type': 'application/json', 'content-length': String(17 * MiB) });
      res.write('{"points":[');
      return; // never finishes: the data plane must not wait for it
    }
    if (local === 'chunked') {
      // No Content-Length: the cap has to hold while reading.
      res.writeHead(200, { 'content-type': 'application/json' });
      const chunk = Buffer.alloc(MiB, 0x20);
      let sent = 0;
      const pump = () => {
        while (sent < 20 && res.write(chunk)) sent++;
        if (sent < 20) res.once('drain', pump);
        else res.end();
      };
      res.on('error', () => undefined);
      pump();
      return;
    }
    if (local === 'broken') {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(
        JSON.stringify({
          platform_version: '1.0',
          building_id: 'broken',
          generated_at: '2026-01-01T00:00:00Z',
          points: [
            {
              point_id: 'p1',
              name: 'fine',
              class: 'brick:Temperature_Sensor',
              access: 'read',
              value_type: 'number',
              is_cumulative: false,
              unit: 'unit:DEG_C',
            },
            {
              point_id: 'p2',
              name: 'bad',
              class: 'brick:Temperature_Sensor',
              access: 'read',
              value_type: 'float',
              is_cumulative: false,
            },
          ],
        }),
      );
      return;
    }
    res.writeHead(500, { 'content-type': 'text/html' });
    res.end('<html><body>Internal Server Error at /srv/app.js:12</body></html>');
  });
  return new Promise((resolve) => {
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as AddressInfo;
      resolve({
        url: `http://127.0.0.1:${port}`,
        close: () =>
          new Promise<void>((done) => {
            server.closeAllConnections();
            server.close(() => done());
          }),
      });
    });
  });
}

describe('provider data plane', function () {
  this.timeout(180_000);
  let authority: RunningAuthority;
  let sample: RunningBuildingBackend;
  let keyed: RunningBuildingBackend;
  let odd: { url: string; close(): Promise<void> };
  let provider: Participant;
  let consumer: Participant;
  const agreements: Record<string, string> = {};
  const brick = loadBrickClassIndex();
  let transfers = 0;

  /** A token for an agreement, as the transfer process would issue it; a client that presents it. */
  async function access(
    agreementId: string,
  ): Promise<{ dp: Client; address: DataAddress; transferId: string }> {
    const transferId = `dp-test-${++transfers}`;
    const address = await issueTransferAccess(provider.connector.db, {
      transferId,
      agreementId,
      consumerDid: consumer.did,
      endpoint: `${provider.connector.url}/dataplane/v1`,
      issueKey: `${transferId}:start`,
    });
    return { dp: client(address.endpoint, endpointProperty(address, 'authorization')), address, transferId };
  }

  before(async () => {
    ({ authority, backend: sample } = await startDataspace());
    keyed = await startBuildingBackend({
      keys: { 'key-soda': ['soda-hall'], 'key-rice': ['rice-hall'] },
      failBuilding: [],
    });
    odd = await startOddBackend();
    provider = await startParticipant('dp-provider', authority);
    consumer = await startParticipant('dp-consumer', authority);
    await publishBuildings(provider, keyed.url, 'dp');

    // Odd backends and a generic source whose path patterns open /points only.
    const api = provider.api;
    const created = async (path: string, body: unknown) => {
      const a = await api.post(path, body);
      expect(a.status, JSON.stringify(a.body)).to.equal(201);
    };
    await created('/api/v1/sources', {
      id: 'odd',
      name: 'odd systems',
      objects: Object.values(ODD),
      backend: { base_url: odd.url, allowed_methods: ['GET'] },
      links: [
        { object: ODD.huge, local_id: 'huge' },
        { object: ODD.chunked, local_id: 'chunked' },
        { object: ODD.broken, local_id: 'broken' },
        { object: ODD.html, local_id: 'html' },
      ],
    });
    await created('/api/v1/sources', {
      id: 'narrow',
      name: 'narrow paths',
      protocol: 'generic',
      objects: [NARROW],
      backend: {
        base_url: sample.url,
        auth_header_name: 'X-Api-Key',
        auth_header_value: 'k',
        allowed_methods: ['GET'],
        allowed_paths: ['v1/buildings/*/points'],
      },
      links: [{ object: NARROW, local_id: 'soda-hall' }],
    });
    await created('/api/v1/products', {
      id: 'odd',
      title: 'odd',
      objects: Object.values(ODD),
      source_id: 'odd',
    });
    await created('/api/v1/products', {
      id: 'narrow',
      title: 'narrow',
      objects: [NARROW],
      source_id: 'narrow',
    });
    for (const id of ['odd', 'narrow'])
      await created('/api/v1/offers', {
        id: `${id}-offer`,
        asset_id: id,
        access_policy_id: 'dp-members',
        contract_policy_id: 'dp-read',
      });

    agreements.read = await negotiateAgreement(consumer, provider, 'dp-both-read');
    agreements.write = await negotiateAgreement(consumer, provider, 'dp-both-write');
    agreements.some = await negotiateAgreement(consumer, provider, 'dp-some-write');
    agreements.narrowed = await negotiateAgreement(consumer, provider, 'dp-both-read', {
      narrowing: { objects: [RICE] },
    });
    agreements.odd = await negotiateAgreement(consumer, provider, 'odd-offer');
    agreements.narrow = await negotiateAgreement(consumer, provider, 'narrow-offer');
  });
  after(async () => {
    await consumer?.connector.stop();
    await provider?.connector.stop();
    await Promise.all([sample?.close(), keyed?.close(), odd?.close(), authority?.close()]);
  });

  describe('tokens', () => {
    it('refuses a missing, malformed, unknown or revoked token with 401 unauthenticated', async () => {
      const base = `${provider.connector.url}/dataplane/v1`;
      const path = `/buildings/${SODA}/points`;
      const none = await client(base).get(path);
      expectGatewayError(none, 401, 'unauthenticated', { retryable: false, origin: 'dataplane' });
      expect(none.headers.get('www-authenticate')).to.equal('Bearer');
      expectGatewayError(await client(base, 'not-a-token').get(path), 401, 'unauthenticated');
      expectGatewayError(await client(base, `dpt_${'x'.repeat(43)}`).get(path), 401, 'unauthenticated');

      const { dp, transferId } = await access(agreements.read!);
      expect((await dp.get(path)).status).to.equal(200);
      await revokeTransferAccess(provider.connector.db, transferId);
      const revoked = await dp.get(path);
      expectGatewayError(revoked, 401, 'unauthenticated', { buildingId: null, origin: 'dataplane' });
      expect(revoked.headers.get('www-authenticate')).to.include('invalid_token');
    });

    it('renews over HTTP; the old token works until the new one is used, a lost answer breaks nothing', async () => {
      const { address } = await access(agreements.read!);
      const path = `/buildings/${SODA}/points?point_ids=${POINTS.energy}`;
      const lost = await refreshTransferToken(address, { allowLoopback: true });
      const renewed = await refreshTransferToken(address, { allowLoopback: true }); // the first answer never arrived
      expect(endpointProperty(renewed, 'authorization')).not.to.equal(
        endpointProperty(lost, 'authorization'),
      );
      const use = (a: DataAddress) => client(a.endpoint, endpointProperty(a, 'authorization')).get(path);
      expectGatewayError(await use(lost), 401, 'unauthenticated');
      expect((await use(address)).status).to.equal(200);
      expect((await use(renewed)).status).to.equal(200);
      expectGatewayError(await use(address), 401, 'unauthenticated');

      const err = await refreshTransferToken(address, { allowLoopback: true }).catch((e: unknown) => e);
      expect(err).to.be.instanceOf(TokenRefreshError);
      expect(err).to.include({ status: 401, retryable: false });
    });
  });

  describe('GET /points', () => {
    it('answers every point of a covered building in the spec shape, with our building id', async () => {
      const { dp } = await access(agreements.read!);
      const res = await dp.get(`/buildings/${SODA}/points`);
      expect(res.status, JSON.stringify(res.body).slice(0, 500)).to.equal(200);
      expect(res.body).to.have.keys('platform_version', 'building_id', 'generated_at', 'points');
      expect(res.body.platform_version).to.match(/^1\.\d+$/);
      expect(res.body.building_id).to.equal(SODA);
      expect(res.body.points).to.have.length(943);
      const occupancy = res.body.points.find((p: { point_id: string }) => p.point_id === POINTS.occupancy);
      expect(occupancy).to.deep.include({
        class: 'brick:Occupancy_Command',
        access: 'read_write',
        value_type: 'integer',
        is_cumulative: false,
        unit: 'unit:UNITLESS',
        constraints: { min: 1, max: 3, step: 1, minimum_interval: 'PT10S' },
        equipment_id: 'ahu_A1',
      });
      for (const p of res.body.points) {
        expect(p.point_id).to.be.a('string').and.not.empty;
        expect(['read', 'write', 'read_write']).to.include(p.access);
        expect(Object.keys(p)).not.to.include.members(['source_class', 'simulation', 'modified_at']);
      }
    });

    it('reaches each building with its own key and local id', async () => {
      const { dp } = await access(agreements.read!);
      const rice = await dp.get(`/buildings/${RICE}/points?point_ids=1st_Floor_Avg_Space_Humidity`);
      expect(rice.status, JSON.stringify(rice.body)).to.equal(200);
      expect(rice.body.building_id).to.equal(RICE);
      expect(rice.body.points.map((p: { point_id: string }) => p.point_id)).to.deep.equal([
        '1st_Floor_Avg_Space_Humidity',
      ]);
    });

    it('filters by Brick class and everything beneath it, aliases and deprecated names included', async () => {
      const { dp } = await access(agreements.read!);
      const sensors = await dp.get(`/buildings/${SODA}/points?class=brick:Temperature_Sensor`);
      expect(sensors.status).to.equal(200);
      expect(sensors.body.points.length).to.be.greaterThan(10);
      for (const p of sensors.body.points)
        expect(brick.isA(p.class, 'brick:Temperature_Sensor'), p.class).to.equal(true);
      const classes = new Set(sensors.body.points.map((p: { class: string }) => p.class));
      expect(classes)
        .to.include('brick:Zone_Air_Temperature_Sensor')
        .and.include('brick:Supply_Air_Temperature_Sensor');

      // The same class as a full IRI.
      const iri = await dp.get(
        `/buildings/${SODA}/points?class=${encodeURIComponent('https://brickschema.org/schema/Brick#Temperature_Sensor')}`,
      );
      expect(iri.body.points).to.have.length(sensors.body.points.length);

      // A deprecated class selects the points typed with its replacement.
      const deprecated = await dp.get(`/buildings/${SODA}/points?class=brick:Zone_Air_Temperature_Setpoint`);
      expect(deprecated.status).to.equal(200);
      expect(deprecated.body.points.map((p: { class: string }) => p.class)).to.include(
        'brick:Target_Zone_Air_Temperature_Setpoint',
      );
    });

    it('an equipment class (here an alias, brick:AHU) selects the points of that equipment', async () => {
      const { dp } = await access(agreements.read!);
      const everything = (await dp.get(`/buildings/${SODA}/points?include=equipment`)).body;
      const ahus = new Set(
        everything.equipment
          .filter((e: { class: string }) => e.class === 'brick:Air_Handling_Unit')
          .map((e: { equipment_id: string }) => e.equipment_id),
      );
      const expected = everything.points.filter((p: { equipment_id?: string }) =>
        ahus.has(p.equipment_id ?? ''),
      );
      const res = await dp.get(`/buildings/${SODA}/points?class=brick:AHU`);
      expect(res.status).to.equal(200);
      expect(res.body.points).to.have.length(expected.length).and.to.have.length.greaterThan(10);
      for (const p of res.body.points) expect(ahus.has(p.equipment_id)).to.equal(true);
      expect(res.body).not.to.have.property('equipment');
    });

    it('a location class selects the points located in such locations and inside them', async () => {
      const { dp } = await access(agreements.read!);
      const everything = (await dp.get(`/buildings/${SODA}/points?include=locations`)).body;
      const byId = new Map<string, { class: string; part_of?: string }>(
        everything.locations.map((l: { location_id: string }) => [l.location_id, l]),
      );
      const inA = (locationId: string | undefined, cls: string) => {
        for (let at = locationId; at !== undefined; at = byId.get(at)?.part_of)
          if (byId.get(at)?.class === cls) return true;
        return false;
      };
      for (const cls of ['brick:HVAC_Zone', 'brick:Floor']) {
        const res = await dp.get(`/buildings/${SODA}/points?class=${cls}`);
        const expected = everything.points.filter((p: { location_id?: string }) => inA(p.location_id, cls));
        expect(expected.length).to.be.greaterThan(100);
        expect(res.body.points, cls).to.have.length(expected.length);
      }
    });

    it('refuses an unknown class, access, flow direction, include, date, parameter or empty point_ids', async () => {
      const { dp } = await access(agreements.read!);
      const bad = async (query: string, target: string) =>
        expectGatewayError(await dp.get(`/buildings/${SODA}/points?${query}`), 400, 'invalid_request', {
          target,
          buildingId: SODA,
          retryable: false,
          origin: 'dataplane',
        });
      await bad('class=brick:Flux_Capacitor', 'class');
      await bad('class=owl:Thing', 'class');
      await bad('access=execute', 'access');
      await bad('flow_direction=sideways', 'flow_direction');
      await bad('include=equipment,owners', 'include');
      await bad('modified_since=2026-02-30T00:00:00Z', 'modified_since');
      await bad('modified_since=2026-01-01', 'modified_since');
      await bad('point_ids=', 'point_ids');
      await bad('point_ids=,', 'point_ids');
      await bad('acess=read', 'acess');
      await bad('access=read&access=write', 'access');
    });

    it('filters by access, flow direction, point ids (list or repeated) and modified_since', async () => {
      const { dp } = await access(agreements.read!);
      const all = (await dp.get(`/buildings/${SODA}/points`)).body.points as Array<Record<string, string>>;
      const writable = (await dp.get(`/buildings/${SODA}/points?access=write`)).body.points;
      expect(writable).to.have.length(all.filter((p) => p.access !== 'read').length);
      expect(writable.every((p: { access: string }) => p.access !== 'read')).to.equal(true);
      const rw = (await dp.get(`/buildings/${SODA}/points?access=read_write`)).body.points;
      expect(rw.every((p: { access: string }) => p.access === 'read_write')).to.equal(true);

      const consumption = (await dp.get(`/buildings/${SODA}/points?flow_direction=consumption`)).body.points;
      expect(consumption.map((p: { point_id: string }) => p.point_id)).to.include(POINTS.energy);
      expect(
        consumption.every((p: { flow_direction: string }) => p.flow_direction === 'consumption'),
      ).to.equal(true);

      const listed = await dp.get(
        `/buildings/${SODA}/points?point_ids=${POINTS.energy},${POINTS.stale}&point_ids=${POINTS.occupancy}`,
      );
      expect(listed.body.points.map((p: { point_id: string }) => p.point_id).sort()).to.deep.equal(
        [POINTS.energy, POINTS.stale, POINTS.occupancy].sort(),
      );

      const since = '2026-02-12T00:00:00Z';
      const changed = (await dp.get(`/buildings/${SODA}/points?modified_since=${since}`)).body.points;
      const expected = all.filter((p) => Date.parse(p.metadata_modified_at!) > Date.parse(since));
      expect(changed).to.have.length(expected.length);
      expect(changed.length).to.be.within(1, all.length - 1);
    });

    it('includes equipment, groups and locations in the spec shape', async () => {
      const { dp } = await access(agreements.read!);
      const res = await dp.get(`/buildings/${SODA}/points?include=equipment,groups&include=locations`);
      expect(res.body).to.have.keys(
        'platform_version',
        'building_id',
        'generated_at',
        'points',
        'equipment',
        'groups',
        'locations',
      );
      expect(res.body.equipment).to.have.length(258);
      expect(res.body.equipment[0]).to.include.keys('equipment_id', 'class');
      expect(res.body.equipment[0].capacity.rated_power_input).to.deep.equal({
        value: 55,
        unit: 'unit:KiloW',
      });
      expect(res.body.groups[0]).to.include.keys('group_id', 'equipment_ids');
      const building = res.body.locations.find(
        (l: { location_id: string }) => l.location_id === 'building_1',
      );
      expect(building).to.deep.equal({
        location_id: 'building_1',
        name: 'Soda Hall',
        class: 'brick:Building',
      });
    });
  });

  describe('GET /points/values', () => {
    it('puts every requested point in exactly one of readings or unavailable, honouring max_age', async () => {
      const { dp } = await access(agreements.read!);
      const ids = [POINTS.energy, POINTS.stale, POINTS.noData, POINTS.writeOnly, 'no-such-point'];
      const res = await dp.get(`/buildings/${SODA}/points/values?point_ids=${ids.join(',')}&max_age=PT1H`);
      expect(res.status, JSON.stringify(res.body)).to.equal(200);
      expect(res.body).to.have.keys('platform_version', 'building_id', 'readings', 'unavailable');
      expect(res.body.building_id).to.equal(SODA);
      expect(res.body.readings).to.have.length(1);
      const [reading] = res.body.readings;
      expect(reading).to.have.keys('point_id', 'timestamp', 'value', 'quality');
      expect(reading).to.include({ point_id: POINTS.energy, quality: 'ok' });
      expect(reading.value).to.be.a('number');
      expect(res.body.unavailable).to.deep.equal([
        { point_id: POINTS.stale, reason: 'too_stale' },
        { point_id: POINTS.noData, reason: 'no_data' },
        { point_id: POINTS.writeOnly, reason: 'no_data' },
        { point_id: 'no-such-point', reason: 'not_found' },
      ]);

      // Without max_age the stale reading is passed, marked stale.
      const any = await dp.get(`/buildings/${SODA}/points/values?point_ids=${POINTS.stale}`);
      expect(any.body.readings).to.have.length(1);
      expect(any.body.readings[0]).to.include({ point_id: POINTS.stale, quality: 'stale' });
    });

    it('answers the whole building when no point ids are given', async () => {
      const { dp } = await access(agreements.read!);
      const res = await dp.get(`/buildings/${RICE}/points/values`);
      expect(res.status).to.equal(200);
      expect(res.body.readings.length + res.body.unavailable.length).to.equal(574);
      const ids = [...res.body.readings, ...res.body.unavailable].map(
        (e: { point_id: string }) => e.point_id,
      );
      expect(new Set(ids).size).to.equal(574);
    });

    it('refuses max_age outside W, D, H, M, S and an empty point_ids', async () => {
      const { dp } = await access(agreements.read!);
      for (const maxAge of ['P1Y', 'P1M', 'PT', '-PT5M', 'pt5m', 'P1D2H'])
        expectGatewayError(
          await dp.get(`/buildings/${SODA}/points/values?max_age=${maxAge}`),
          400,
          'invalid_request',
          { target: 'max_age' },
        );
      expectGatewayError(
        await dp.get(`/buildings/${SODA}/points/values?point_ids=`),
        400,
        'invalid_request',
        {
          target: 'point_ids',
        },
      );
    });
  });

  describe('coverage', () => {
    it('shows only the covered points, and only the equipment and locations they refer to', async () => {
      const { dp } = await access(agreements.some!);
      const res = await dp.get(`/buildings/${SODA}/points?include=equipment,groups,locations`);
      expect(res.status).to.equal(200);
      expect(res.body.points.map((p: { point_id: string }) => p.point_id).sort()).to.deep.equal(
        [...SOME_POINTS].sort(),
      );
      expect(res.body.equipment.map((e: { equipment_id: string }) => e.equipment_id).sort()).to.deep.equal([
        'ahu_A1',
        'supply_fan_S11',
      ]);
      for (const g of res.body.groups)
        expect(['ahu_A1', 'supply_fan_S11']).to.include.members(g.equipment_ids);
      expect(res.body.locations.map((l: { location_id: string }) => l.location_id)).to.deep.equal([
        'building_1',
      ]);
    });

    it('uncovered points come back unavailable with reason forbidden', async () => {
      const { dp } = await access(agreements.some!);
      const res = await dp.get(
        `/buildings/${SODA}/points/values?point_ids=${POINTS.energy},${POINTS.noData},no-such-point`,
      );
      expect(res.status).to.equal(200);
      expect(res.body.readings.map((r: { point_id: string }) => r.point_id)).to.deep.equal([POINTS.energy]);
      expect(res.body.unavailable).to.deep.equal([
        { point_id: POINTS.noData, reason: 'forbidden' },
        { point_id: 'no-such-point', reason: 'forbidden' },
      ]);
      const whole = await dp.get(`/buildings/${SODA}/points/values`);
      const ids = [...whole.body.readings, ...whole.body.unavailable].map(
        (e: { point_id: string }) => e.point_id,
      );
      expect(ids.sort()).to.deep.equal([...SOME_POINTS].sort());
    });

    it('refuses a building outside the agreement with 403, an unknown one with building_not_found', async () => {
      const some = (await access(agreements.some!)).dp;
      expectGatewayError(await some.get(`/buildings/${RICE}/points`), 403, 'forbidden', {
        buildingId: RICE,
        retryable: false,
      });
      expectGatewayError(await some.get(`/buildings/0000.00.0000000000/points`), 404, 'building_not_found', {
        buildingId: '0000.00.0000000000',
      });
      // The consumer's narrowing leaves Rice Hall only.
      const narrowed = (await access(agreements.narrowed!)).dp;
      expectGatewayError(await narrowed.get(`/buildings/${SODA}/points`), 403, 'forbidden');
      expect((await narrowed.get(`/buildings/${RICE}/points`)).status).to.equal(200);
    });

    it('answers not_found for routes it does not have', async () => {
      const { dp } = await access(agreements.read!);
      expectGatewayError(await dp.get(`/buildings/${SODA}/equipment`), 404, 'not_found', {
        buildingId: SODA,
      });
      expectGatewayError(await dp.get(`/anything`), 404, 'not_found', { buildingId: null });
    });

    it("lets through only the paths the binding's patterns allow", async () => {
      const { dp } = await access(agreements.narrow!);
      const points = await dp.get(`/buildings/${NARROW}/points?point_ids=${POINTS.energy}`);
      expect(points.status, JSON.stringify(points.body)).to.equal(200);
      expectGatewayError(await dp.get(`/buildings/${NARROW}/points/values`), 403, 'forbidden', {
        message: /does not let \/v1\/buildings\/soda-hall\/points\/values through/,
      });
    });
  });

  describe('writes', () => {
    const setpoints = (point_id: string, value: unknown) => ({ setpoints: [{ point_id, value }] });

    it('forwards a write the agreement covers and answers with our building id', async () => {
      const { dp } = await access(agreements.write!);
      const res = await dp.post(`/buildings/${SODA}/setpoints`, setpoints(POINTS.occupancy, 2));
      expect(res.status, JSON.stringify(res.body)).to.equal(200);
      expect(res.body).to.include({ building_id: SODA });
      expect(res.body.accepted[0]).to.include({ point_id: POINTS.occupancy, value: 2 });
      const read = await dp.get(`/buildings/${SODA}/points/values?point_ids=${POINTS.occupancy}`);
      expect(read.body.readings[0]).to.include({ value: 2, quality: 'ok' });
    });

    it("passes the backend's refusal on in our shape, marked as the backend's", async () => {
      const { dp } = await access(agreements.write!);
      expectGatewayError(
        await dp.post(`/buildings/${SODA}/setpoints`, setpoints(POINTS.energy, 1)),
        409,
        'point_not_writable',
        { target: 'setpoints[0].point_id', origin: 'backend', buildingId: SODA, retryable: false },
      );
      expectGatewayError(
        await dp.post(`/buildings/${SODA}/setpoints`, setpoints(POINTS.occupancy, 7)),
        422,
        'value_out_of_range',
        { target: 'setpoints[0].value', origin: 'backend' },
      );
      expectGatewayError(
        await dp.post(`/buildings/${SODA}/setpoints`, setpoints(POINTS.occupancy, 'two')),
        422,
        'type_mismatch',
        { origin: 'backend' },
      );
    });

    it('refuses writes the agreement, the coverage or the binding do not allow', async () => {
      const read = (await access(agreements.read!)).dp;
      expectGatewayError(
        await read.post(`/buildings/${SODA}/setpoints`, setpoints(POINTS.occupancy, 2)),
        403,
        'forbidden',
        {
          message: /does not permit writing/,
          origin: 'dataplane',
        },
      );
      const some = (await access(agreements.some!)).dp;
      expectGatewayError(
        await some.post(`/buildings/${SODA}/setpoints`, {
          setpoints: [
            { point_id: POINTS.occupancy, value: 2 },
            { point_id: 'fan_speed_reset_exhaust_fan_E12', value: 50 },
          ],
        }),
        403,
        'forbidden',
        { target: 'setpoints[1].point_id' },
      );
      expect(
        (await some.post(`/buildings/${SODA}/setpoints`, setpoints(POINTS.occupancy, 3))).status,
      ).to.equal(200);
      const write = (await access(agreements.write!)).dp;
      expectGatewayError(
        await write.call('PATCH', `/buildings/${SODA}/setpoints`, setpoints(POINTS.occupancy, 2)),
        403,
        'forbidden',
        { message: /does not let PATCH through/ },
      );
      expectGatewayError(
        await write.post(`/buildings/${SODA}/setpoints`, 'point=1', { 'content-type': 'text/plain' }),
        415,
        'invalid_request',
      );
    });
  });

  describe('backends that fail', () => {
    it('a building whose systems cannot be reached: upstream_unavailable, retryable, passed on', async () => {
      const failing = await startBuildingBackend({
        keys: { 'key-soda': '*', 'key-rice': '*' },
        failBuilding: ['rice-hall'],
      });
      try {
        await provider.api.put('/api/v1/sources/dp-campus', {
          name: 'dp campus',
          objects: [SODA, RICE],
          backend: {
            base_url: failing.url,
            auth_header_name: 'X-Api-Key',
            auth_header_value: 'not-a-key',
            allowed_methods: ['GET', 'POST'],
          },
          links: [
            { object: SODA, local_id: 'soda-hall', auth_header_value: 'key-soda' },
            { object: RICE, local_id: 'rice-hall', auth_header_value: 'key-rice' },
          ],
        });
        const { dp } = await access(agreements.read!);
        const res = await dp.get(`/buildings/${RICE}/points`);
        expectGatewayError(res, 503, 'upstream_unavailable', {
          retryable: true,
          origin: 'backend',
          buildingId: RICE,
        });
        expect(res.body.error.retry_after).to.equal('PT30S');
        expect(res.headers.get('retry-after')).to.equal('30');
      } finally {
        await provider.api.put('/api/v1/sources/dp-campus', {
          name: 'dp campus',
          objects: [SODA, RICE],
          backend: {
            base_url: keyed.url,
            auth_header_name: 'X-Api-Key',
            auth_header_value: 'not-a-key',
            allowed_methods: ['GET', 'POST'],
          },
          links: [
            { object: SODA, local_id: 'soda-hall', auth_header_value: 'key-soda' },
            { object: RICE, local_id: 'rice-hall', auth_header_value: 'key-rice' },
          ],
        });
        await failing.close();
      }
    });

    it("a backend refusing the data plane's key is upstream_unavailable, not the application's problem", async () => {
      const { dp } = await access(agreements.narrow!);
      await provider.api.put('/api/v1/sources/narrow', {
        name: 'narrow paths',
        protocol: 'generic',
        objects: [NARROW],
        backend: {
          base_url: sample.url,
          auth_header_name: 'X-Api-Key',
          auth_header_value: 'wrong',
          allowed_methods: ['GET'],
          allowed_paths: ['v1/buildings/*/points'],
        },
        links: [{ object: NARROW, local_id: 'soda-hall' }],
      });
      try {
        expectGatewayError(await dp.get(`/buildings/${NARROW}/points`), 502, 'upstream_unavailable', {
          retryable: false,
          origin: 'dataplane',
          message: /refused the data plane's key/,
        });
      } finally {
        await provider.api.put('/api/v1/sources/narrow', {
          name: 'narrow paths',
          protocol: 'generic',
          objects: [NARROW],
          backend: {
            base_url: sample.url,
            auth_header_name: 'X-Api-Key',
            auth_header_value: 'k',
            allowed_methods: ['GET'],
            allowed_paths: ['v1/buildings/*/points'],
          },
          links: [{ object: NARROW, local_id: 'soda-hall' }],
        });
      }
    });

    it('caps answers at 16 MiB, by Content-Length and while reading', async () => {
      const { dp } = await access(agreements.odd!);
      expectGatewayError(await dp.get(`/buildings/${ODD.huge}/points`), 502, 'upstream_unavailable', {
        retryable: false,
        message: /more than 16 MiB/,
      });
      expectGatewayError(await dp.get(`/buildings/${ODD.chunked}/points`), 502, 'upstream_unavailable', {
        retryable: false,
        message: /more than 16 MiB/,
      });
    });

    it('refuses to pass an answer that breaks the schema, naming the field', async () => {
      const { dp } = await access(agreements.odd!);
      const res = await dp.get(`/buildings/${ODD.broken}/points`);
      expectGatewayError(res, 502, 'upstream_unavailable', { retryable: false });
      expect(res.body.error.details).to.deep.equal([
        {
          code: 'invalid_response',
          message: 'points[1].value_type: must be one of number, integer, boolean, string',
          target: 'points[1].value_type',
        },
      ]);
    });

    it("never passes a backend's raw error body", async () => {
      const { dp } = await access(agreements.odd!);
      const res = await dp.get(`/buildings/${ODD.html}/points`);
      expectGatewayError(res, 503, 'upstream_unavailable', { retryable: true });
      expect(JSON.stringify(res.body)).not.to.include('/srv/app.js');
    });
  });
});
