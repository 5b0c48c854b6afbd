/**
 * The sample building backend (dev/building-backend) over real HTTP, and the Brick class index
 * (gateway/brick) it and the data plane rely on. Shapes are checked against the spec's Point,
 * Equipment, Group, Location, Reading, Unavailable entry and Gateway error.
 */
import { expect } from 'chai';
import { startBuildingBackend, type RunningBuildingBackend } from '../dev/building-backend/index.js';
import { loadBuildings } from '../dev/building-backend/building-data.js';
import { loadBrickClassIndex } from '../gateway/brick/class-index.js';

const KEY_ALL = 'test-key-all-buildings';
const KEY_SODA = 'test-key-soda-only';
const BUILDINGS = ['soda-hall', 'rice-hall'] as const;

const CURIE = /^[A-Za-z0-9_-]+:[A-Za-z0-9_.-]+$/;
const UNIT = /^unit:[A-Za-z0-9_-]+$/;
const DURATION = /^P(?!$)(\d+W)?(\d+D)?(T(?=\d)(\d+H)?(\d+M)?(\d+S)?)?$/;
const RFC3339 = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$/;
const PLATFORM_VERSION = /^1\.\d+$/;
const ACCESS = ['read', 'write', 'read_write'];
const VALUE_TYPES = ['number', 'integer', 'boolean', 'string'];
const FLOW_DIRECTIONS = ['consumption', 'production', 'delivery', 'return_delivery', 'charge', 'discharge'];

// Response bodies are checked field by field at run time; a static type would only restate the checks.
// eslint-disable-next-line @typescript-eslint/no-explicit-any
type Json = Record<string, any>;

interface Answer {
  status: number;
  body: Json;
  headers: Headers;
}

async function call(
  base: string,
  path: string,
  init: { key?: string; method?: string; body?: unknown } = {},
): Promise<Answer> {
  const headers: Record<string, string> = {};
  if (init.key !== undefined) headers['X-Api-Key'] = init.key;
  if (init.body !== undefined) headers['content-type'] = 'application/json';
  const res = await fetch(`${base}${path}`, {
    method: init.method ?? 'GET',
    headers,
    ...(init.body !== undefined ? { body: JSON.stringify(init.body) } : {}),
  });
  return { status: res.status, body: (await res.json()) as Json, headers: res.headers };
}

function expectErrorResponse(
  answer: Answer,
  status: number,
  code: string,
  extra: { buildingId?: string; target?: string } = {},
): void {
  expect(answer.status, JSON.stringify(answer.body)).to.equal(status);
  expect(answer.body.platform_version).to.match(PLATFORM_VERSION);
  expect(answer.body.error).to.be.an('object');
  expect(answer.body.error.code).to.equal(code);
  expect(answer.body.error.message).to.be.a('string').and.not.empty;
  expect(answer.body.error.retryable).to.be.a('boolean');
  if (extra.buildingId) expect(answer.body.building_id).to.equal(extra.buildingId);
  if (extra.target) expect(answer.body.error.target).to.equal(extra.target);
}

function expectPoint(p: Json): void {
  const where = `point ${JSON.stringify(p)}`;
  expect(p.point_id, where).to.be.a('string').and.not.empty;
  expect(p.point_id, where).to.match(/^[^,\s]+$/);
  expect(p.name, where).to.be.a('string');
  expect(p.class, where).to.match(CURIE);
  expect(ACCESS, where).to.include(p.access);
  expect(VALUE_TYPES, where).to.include(p.value_type);
  expect(p.is_cumulative, where).to.be.a('boolean');
  if (p.value_type === 'number' || p.value_type === 'integer') expect(p.unit, where).to.match(UNIT);
  if (p.constraints !== undefined) {
    const c = p.constraints;
    if (c.min !== undefined) expect(c.min, where).to.be.a('number');
    if (c.max !== undefined) expect(c.max, where).to.be.a('number');
    if (c.min !== undefined && c.max !== undefined) expect(c.min, where).to.be.at.most(c.max);
    if (c.step !== undefined) expect(c.step, where).to.be.a('number').and.above(0);
    if (c.minimum_interval !== undefined) expect(c.minimum_interval, where).to.match(DURATION);
  }
  if (p.flow_direction !== undefined) expect(FLOW_DIRECTIONS, where).to.include(p.flow_direction);
  if (p.equipment_id !== undefined) expect(p.equipment_id, where).to.be.a('string').and.not.empty;
  if (p.location_id !== undefined) expect(p.location_id, where).to.be.a('string').and.not.empty;
  expect(p.metadata_modified_at, where).to.match(RFC3339);
  // Backend bookkeeping stays inside the backend.
  expect(p, where).not.to.have.any.keys('modified_at', 'simulation', 'source_class');
}

function expectValueOfType(value: unknown, valueType: string, where: string): void {
  if (valueType === 'integer') expect(Number.isInteger(value), where).to.equal(true);
  else if (valueType === 'number') expect(value, where).to.be.a('number');
  else expect(typeof value, where).to.equal(valueType);
}

describe('sample building backend', function () {
  let backend: RunningBuildingBackend;
  const points = new Map<string, Json[]>();

  before(async function () {
    backend = await startBuildingBackend({ keys: { [KEY_ALL]: '*', [KEY_SODA]: ['soda-hall'] } });
    for (const id of BUILDINGS) {
      const answer = await call(backend.url, `/v1/buildings/${id}/points`, { key: KEY_ALL });
      points.set(id, answer.body.points as Json[]);
    }
  });

  after(async function () {
    await backend.close();
  });

  const pointsOf = (id: string): Json[] => points.get(id) ?? [];
  const find = (id: string, pred: (p: Json) => boolean, what: string): Json => {
    const found = pointsOf(id).find(pred);
    if (!found) throw new Error(`no ${what} in ${id}`);
    return found;
  };
  const writableNumber = (p: Json): boolean =>
    p.access !== 'read' &&
    p.value_type === 'number' &&
    p.constraints?.min !== undefined &&
    p.constraints?.max !== undefined;

  describe('health', function () {
    it('answers ok without a key', async function () {
      const answer = await call(backend.url, '/v1/health');
      expect(answer.status).to.equal(200);
      expect(answer.body).to.deep.equal({ status: 'ok' });
    });

    it('answers ok with a valid key and 401 with a wrong one', async function () {
      expect((await call(backend.url, '/v1/health', { key: KEY_SODA })).status).to.equal(200);
      expectErrorResponse(await call(backend.url, '/v1/health', { key: 'wrong' }), 401, 'unauthenticated');
    });
  });

  describe('GET /points', function () {
    for (const id of BUILDINGS) {
      it(`lists valid points of ${id}`, async function () {
        const answer = await call(backend.url, `/v1/buildings/${id}/points`, { key: KEY_ALL });
        expect(answer.status).to.equal(200);
        expect(answer.body.platform_version).to.match(PLATFORM_VERSION);
        expect(answer.body.building_id).to.equal(id);
        expect(answer.body.generated_at).to.match(RFC3339);
        expect(answer.body).not.to.have.any.keys('equipment', 'groups', 'locations');
        const list = answer.body.points as Json[];
        expect(list).to.have.length.above(100);
        list.forEach(expectPoint);
        expect(new Set(list.map((p) => p.point_id)).size).to.equal(list.length);
      });
    }

    it('covers every access and value type across the two buildings', function () {
      const all = BUILDINGS.flatMap(pointsOf);
      expect(new Set(all.map((p) => p.access))).to.deep.equal(new Set(ACCESS));
      expect(new Set(all.map((p) => p.value_type))).to.deep.equal(new Set(VALUE_TYPES));
      expect(all.some((p) => p.is_cumulative && p.flow_direction === 'consumption')).to.equal(true);
    });

    it('spreads metadata change times so modified_since can split them', function () {
      const times = pointsOf('soda-hall').map((p) => Date.parse(p.metadata_modified_at));
      const middle = Date.UTC(2026, 0, 1);
      expect(times.filter((t) => t < middle)).to.have.length.above(50);
      expect(times.filter((t) => t >= middle)).to.have.length.above(50);
    });

    it('adds equipment, groups and locations on request, consistent with the points', async function () {
      const answer = await call(
        backend.url,
        '/v1/buildings/soda-hall/points?include=equipment,groups,locations',
        { key: KEY_ALL },
      );
      expect(answer.status).to.equal(200);
      const { equipment, groups, locations } = answer.body as {
        equipment: Json[];
        groups: Json[];
        locations: Json[];
      };
      const equipmentIds = new Set(equipment.map((e) => e.equipment_id));
      const locationIds = new Set(locations.map((l) => l.location_id));

      for (const e of equipment) {
        expect(e.equipment_id).to.be.a('string').and.not.empty;
        expect(e.class).to.match(CURIE);
        if (e.is_fed_by !== undefined)
          for (const f of e.is_fed_by as string[]) expect(equipmentIds.has(f), f).to.equal(true);
        if (e.location_id !== undefined) expect(locationIds.has(e.location_id), e.location_id).to.equal(true);
        for (const q of Object.values((e.capacity ?? {}) as Record<string, Json>)) {
          expect(q.value).to.be.a('number');
          if (q.unit !== undefined) expect(q.unit).to.match(UNIT);
        }
      }
      expect(equipment.some((e) => e.capacity !== undefined)).to.equal(true);
      expect(equipment.some((e) => Array.isArray(e.is_fed_by) && e.is_fed_by.length > 0)).to.equal(true);

      expect(groups).to.have.length.above(0);
      for (const g of groups) {
        expect(g.group_id).to.be.a('string').and.not.empty;
        expect(g.equipment_ids).to.be.an('array').that.is.not.empty;
        for (const id of g.equipment_ids as string[]) expect(equipmentIds.has(id), id).to.equal(true);
      }

      const roots = locations.filter((l) => l.part_of === undefined);
      expect(roots.map((l) => l.class)).to.deep.equal(['brick:Building']);
      for (const l of locations) {
        expect(l.location_id).to.be.a('string').and.not.empty;
        expect(l.name).to.be.a('string');
        expect(l.class).to.match(CURIE);
        if (l.part_of !== undefined) {
          expect(l.part_of).to.not.equal(l.location_id);
          expect(locationIds.has(l.part_of), l.part_of).to.equal(true);
        }
      }
      for (const p of answer.body.points as Json[]) {
        if (p.equipment_id !== undefined)
          expect(equipmentIds.has(p.equipment_id), p.equipment_id).to.equal(true);
        if (p.location_id !== undefined) expect(locationIds.has(p.location_id), p.location_id).to.equal(true);
      }
    });

    it('accepts include as a repeated parameter and only adds what is asked', async function () {
      const answer = await call(
        backend.url,
        '/v1/buildings/rice-hall/points?include=groups&include=locations',
        { key: KEY_ALL },
      );
      expect(answer.status).to.equal(200);
      expect(answer.body).to.include.keys('groups', 'locations');
      expect(answer.body).not.to.have.property('equipment');
      const onlyEquipment = await call(backend.url, '/v1/buildings/rice-hall/points?include=equipment', {
        key: KEY_ALL,
      });
      expect(onlyEquipment.body).to.have.property('equipment');
      expect(onlyEquipment.body).not.to.have.any.keys('groups', 'locations');
    });

    it('refuses an unknown include with invalid_request', async function () {
      const answer = await call(backend.url, '/v1/buildings/rice-hall/points?include=equipment,meters', {
        key: KEY_ALL,
      });
      expectErrorResponse(answer, 400, 'invalid_request', { buildingId: 'rice-hall', target: 'include' });
    });
  });

  describe('GET /points/values', function () {
    for (const id of BUILDINGS) {
      it(`puts every point of ${id} in exactly one of readings or unavailable`, async function () {
        const answer = await call(backend.url, `/v1/buildings/${id}/points/values`, { key: KEY_ALL });
        expect(answer.status).to.equal(200);
        expect(answer.body.platform_version).to.match(PLATFORM_VERSION);
        expect(answer.body.building_id).to.equal(id);
        const readings = answer.body.readings as Json[];
        const unavailable = answer.body.unavailable as Json[];
        const seen = [...readings, ...unavailable].map((r) => r.point_id as string);
        expect(seen).to.have.length(new Set(seen).size);
        expect(new Set(seen)).to.deep.equal(new Set(pointsOf(id).map((p) => p.point_id)));

        const byId = new Map(pointsOf(id).map((p) => [p.point_id, p]));
        const now = Date.now();
        for (const r of readings) {
          const where = JSON.stringify(r);
          expect(r.timestamp, where).to.match(RFC3339);
          expect(Date.parse(r.timestamp), where).to.be.at.most(now);
          expect(['ok', 'stale'], where).to.include(r.quality);
          expectValueOfType(r.value, byId.get(r.point_id)?.value_type, where);
        }
        for (const u of unavailable)
          expect(['no_data', 'too_stale', 'not_found', 'forbidden']).to.include(u.reason);
        expect(
          unavailable.some((u) => u.reason === 'no_data'),
          'some points without data',
        ).to.equal(true);
        const stale = readings.filter((r) => r.quality === 'stale');
        expect(stale, 'some stale readings').to.not.be.empty;
        for (const r of stale) expect(now - Date.parse(r.timestamp)).to.be.above(60 * 60 * 1000);
        expect(
          readings.filter((r) => r.quality === 'ok').every((r) => now - Date.parse(r.timestamp) < 60_000),
        ).to.equal(true);
      });
    }

    it('takes point_ids as a comma list and reports unknown ids as not_found', async function () {
      const [a, b] = pointsOf('rice-hall').filter((p) => p.access !== 'write');
      const query = `point_ids=${a?.point_id},${b?.point_id},no-such-point`;
      const answer = await call(backend.url, `/v1/buildings/rice-hall/points/values?${query}`, {
        key: KEY_ALL,
      });
      expect(answer.status).to.equal(200);
      const ids = [...answer.body.readings, ...answer.body.unavailable].map((r: Json) => r.point_id);
      expect(ids).to.have.members([a?.point_id, b?.point_id, 'no-such-point']);
      expect(answer.body.unavailable).to.deep.include({ point_id: 'no-such-point', reason: 'not_found' });
    });

    it('takes point_ids as a repeated parameter', async function () {
      const [a, b] = pointsOf('soda-hall');
      const query = `point_ids=${a?.point_id}&point_ids=${b?.point_id}`;
      const answer = await call(backend.url, `/v1/buildings/soda-hall/points/values?${query}`, {
        key: KEY_ALL,
      });
      const ids = [...answer.body.readings, ...answer.body.unavailable].map((r: Json) => r.point_id);
      expect(ids).to.have.members([a?.point_id, b?.point_id]);
    });

    it('refuses an empty point_ids with invalid_request', async function () {
      const answer = await call(backend.url, '/v1/buildings/soda-hall/points/values?point_ids=', {
        key: KEY_ALL,
      });
      expectErrorResponse(answer, 400, 'invalid_request', { target: 'point_ids' });
    });

    it('moves values over time, deterministically', async function () {
      let clock = Date.UTC(2026, 5, 1, 12);
      const pinned = await startBuildingBackend({ keys: { [KEY_ALL]: '*' }, now: () => clock });
      try {
        const path = '/v1/buildings/soda-hall/points/values';
        const first = await call(pinned.url, path, { key: KEY_ALL });
        const again = await call(pinned.url, path, { key: KEY_ALL });
        expect(again.body).to.deep.equal(first.body);
        clock += 7 * 60_000;
        const later = await call(pinned.url, path, { key: KEY_ALL });
        const values = (body: Json): Map<string, unknown> =>
          new Map((body.readings as Json[]).map((r) => [r.point_id, r.value]));
        const before = values(first.body);
        const changed = [...values(later.body)].filter(([id, v]) => before.get(id) !== v);
        expect(changed.length).to.be.above(100);
      } finally {
        await pinned.close();
      }
    });
  });

  describe('POST /setpoints', function () {
    const setpoints = (id: string, body: unknown, key = KEY_ALL): Promise<Answer> =>
      call(backend.url, `/v1/buildings/${id}/setpoints`, { key, method: 'POST', body });
    const valueOf = async (id: string, pointId: string): Promise<Json | undefined> => {
      const answer = await call(backend.url, `/v1/buildings/${id}/points/values?point_ids=${pointId}`, {
        key: KEY_ALL,
      });
      return (answer.body.readings as Json[])[0];
    };

    it('accepts a write within the constraints and reports the value afterwards', async function () {
      const point = find(
        'soda-hall',
        (p) => writableNumber(p) && p.class === 'brick:Target_Zone_Air_Temperature_Setpoint',
        'zone setpoint',
      );
      const value = point.constraints.max - point.constraints.step;
      const answer = await setpoints('soda-hall', { setpoints: [{ point_id: point.point_id, value }] });
      expect(answer.status, JSON.stringify(answer.body)).to.equal(200);
      expect(answer.body.platform_version).to.match(PLATFORM_VERSION);
      expect(answer.body.building_id).to.equal('soda-hall');
      expect(answer.body.accepted).to.have.length(1);
      expect(answer.body.accepted[0]).to.include({ point_id: point.point_id, value });
      const reading = await valueOf('soda-hall', point.point_id);
      expect(reading).to.include({ point_id: point.point_id, value, quality: 'ok' });
    });

    it('accepts booleans and integers for points of those types', async function () {
      const toggle = find(
        'soda-hall',
        (p) => p.access === 'read_write' && p.value_type === 'boolean',
        'boolean command',
      );
      const multistate = find(
        'soda-hall',
        (p) => p.access === 'read_write' && p.value_type === 'integer',
        'integer command',
      );
      const answer = await setpoints('soda-hall', {
        setpoints: [
          { point_id: toggle.point_id, value: true },
          { point_id: multistate.point_id, value: multistate.constraints.min },
        ],
      });
      expect(answer.status, JSON.stringify(answer.body)).to.equal(200);
      expect((await valueOf('soda-hall', multistate.point_id))?.value).to.equal(multistate.constraints.min);
    });

    it('refuses a read-only point with point_not_writable', async function () {
      const sensor = find('rice-hall', (p) => p.access === 'read' && p.value_type === 'number', 'sensor');
      const answer = await setpoints('rice-hall', { setpoints: [{ point_id: sensor.point_id, value: 1 }] });
      expectErrorResponse(answer, 409, 'point_not_writable', {
        buildingId: 'rice-hall',
        target: 'setpoints[0].point_id',
      });
      expect(answer.body.error.retryable).to.equal(false);
    });

    it('refuses a value outside the constraints with value_out_of_range', async function () {
      const point = find('rice-hall', writableNumber, 'writable number');
      const answer = await setpoints('rice-hall', {
        setpoints: [{ point_id: point.point_id, value: point.constraints.max + 1 }],
      });
      expectErrorResponse(answer, 422, 'value_out_of_range', { target: 'setpoints[0].value' });
      const below = await setpoints('rice-hall', {
        setpoints: [{ point_id: point.point_id, value: point.constraints.min - 1 }],
      });
      expectErrorResponse(below, 422, 'value_out_of_range', { target: 'setpoints[0].value' });
    });

    it('refuses a value of the wrong type with type_mismatch', async function () {
      const point = find('soda-hall', writableNumber, 'writable number');
      const answer = await setpoints('soda-hall', {
        setpoints: [{ point_id: point.point_id, value: 'warm' }],
      });
      expectErrorResponse(answer, 422, 'type_mismatch', { target: 'setpoints[0].value' });
      const integer = find(
        'soda-hall',
        (p) => p.access !== 'read' && p.value_type === 'integer',
        'integer point',
      );
      const fraction = await setpoints('soda-hall', {
        setpoints: [{ point_id: integer.point_id, value: 1.5 }],
      });
      expectErrorResponse(fraction, 422, 'type_mismatch', { target: 'setpoints[0].value' });
    });

    it('refuses an unknown point with point_not_found', async function () {
      const answer = await setpoints('soda-hall', { setpoints: [{ point_id: 'no-such-point', value: 1 }] });
      expectErrorResponse(answer, 404, 'point_not_found', { target: 'setpoints[0].point_id' });
    });

    it('refuses the write as a whole when one entry is wrong', async function () {
      const points = pointsOf('rice-hall').filter(writableNumber);
      const [good, bad] = points;
      if (!good || !bad) throw new Error('need two writable points');
      const before = await valueOf('rice-hall', good.point_id);
      const target = good.constraints.min === before?.value ? good.constraints.max : good.constraints.min;
      const answer = await setpoints('rice-hall', {
        setpoints: [
          { point_id: good.point_id, value: target },
          { point_id: bad.point_id, value: bad.constraints.max + 100 },
        ],
      });
      expectErrorResponse(answer, 422, 'value_out_of_range', { target: 'setpoints[1].value' });
      expect((await valueOf('rice-hall', good.point_id))?.value).to.deep.equal(before?.value);
    });

    it('refuses a malformed body with invalid_request', async function () {
      expectErrorResponse(await setpoints('soda-hall', { points: [] }), 400, 'invalid_request', {
        target: 'setpoints',
      });
      expectErrorResponse(
        await setpoints('soda-hall', { setpoints: [{ value: 1 }] }),
        400,
        'invalid_request',
        {
          target: 'setpoints[0].point_id',
        },
      );
    });
  });

  describe('keys, buildings and routes', function () {
    it('answers 401 unauthenticated without a key or with an unknown key', async function () {
      expectErrorResponse(await call(backend.url, '/v1/buildings/soda-hall/points'), 401, 'unauthenticated', {
        buildingId: 'soda-hall',
      });
      expectErrorResponse(
        await call(backend.url, '/v1/buildings/soda-hall/points/values', { key: 'nope' }),
        401,
        'unauthenticated',
      );
      expectErrorResponse(
        await call(backend.url, '/v1/buildings/soda-hall/setpoints', {
          key: 'nope',
          method: 'POST',
          body: {},
        }),
        401,
        'unauthenticated',
      );
    });

    it('answers 403 forbidden when the key may not use the building', async function () {
      expect((await call(backend.url, '/v1/buildings/soda-hall/points', { key: KEY_SODA })).status).to.equal(
        200,
      );
      const answer = await call(backend.url, '/v1/buildings/rice-hall/points', { key: KEY_SODA });
      expectErrorResponse(answer, 403, 'forbidden', { buildingId: 'rice-hall' });
      expect(answer.body.error.retryable).to.equal(false);
    });

    it('answers 404 building_not_found for an unknown building', async function () {
      const answer = await call(backend.url, '/v1/buildings/no-such-building/points', { key: KEY_ALL });
      expectErrorResponse(answer, 404, 'building_not_found', { buildingId: 'no-such-building' });
    });

    it('answers 404 not_found for an unknown route', async function () {
      expectErrorResponse(
        await call(backend.url, '/v1/buildings/soda-hall/meters', { key: KEY_ALL }),
        404,
        'not_found',
      );
      expectErrorResponse(await call(backend.url, '/v2/health'), 404, 'not_found');
      expectErrorResponse(
        await call(backend.url, '/v1/buildings/soda-hall/points', { key: KEY_ALL, method: 'DELETE' }),
        404,
        'not_found',
      );
    });

    it('answers 503 upstream_unavailable, retryable, for a building whose systems are unreachable', async function () {
      const failing = await startBuildingBackend({
        keys: { [KEY_ALL]: '*' },
        failBuilding: ['rice-hall'],
        latencyMs: 5,
      });
      try {
        const answer = await call(failing.url, '/v1/buildings/rice-hall/points/values', { key: KEY_ALL });
        expectErrorResponse(answer, 503, 'upstream_unavailable', { buildingId: 'rice-hall' });
        expect(answer.body.error.retryable).to.equal(true);
        expect(answer.body.error.retry_after).to.equal('PT30S');
        expect(answer.headers.get('retry-after')).to.equal('30');
        expect((await call(failing.url, '/v1/buildings/soda-hall/points', { key: KEY_ALL })).status).to.equal(
          200,
        );
      } finally {
        await failing.close();
      }
    });

    it('reads the key from the configured header', async function () {
      const custom = await startBuildingBackend({
        keys: { [KEY_ALL]: '*' },
        authHeaderName: 'Authorization',
      });
      try {
        const ok = await fetch(`${custom.url}/v1/buildings/soda-hall/points`, {
          headers: { authorization: KEY_ALL },
        });
        expect(ok.status).to.equal(200);
        await ok.arrayBuffer();
        expectErrorResponse(
          await call(custom.url, '/v1/buildings/soda-hall/points', { key: KEY_ALL }),
          401,
          'unauthenticated',
        );
      } finally {
        await custom.close();
      }
    });
  });
});

describe('Brick class index', function () {
  const index = loadBrickClassIndex();

  it('knows a class and everything beneath it', function () {
    const temperatureSensors = index.descendantsOf('brick:Temperature_Sensor');
    expect(temperatureSensors.has('brick:Temperature_Sensor')).to.equal(true);
    expect(temperatureSensors.has('brick:Zone_Air_Temperature_Sensor')).to.equal(true);
    expect(temperatureSensors.has('brick:Humidity_Sensor')).to.equal(false);
    expect(index.descendantsOf('brick:Point').size).to.be.above(800);
  });

  it('tells equipment and systems from points and locations', function () {
    expect(index.isEquipmentOrSystem('brick:AHU')).to.equal(true);
    expect(index.isEquipmentOrSystem('brick:Variable_Air_Volume_Box')).to.equal(true);
    // Since Brick 1.3 systems sit under Collection, not Equipment.
    expect(index.isEquipmentOrSystem('brick:HVAC_System')).to.equal(true);
    expect(index.isEquipmentOrSystem('brick:Zone_Air_Temperature_Sensor')).to.equal(false);
    expect(index.isEquipmentOrSystem('brick:Room')).to.equal(false);
    expect([...index.kindsOf('brick:Room')]).to.include('location');
  });

  it('does not know a made-up class', function () {
    expect(index.isKnown('brick:Flux_Capacitor')).to.equal(false);
    expect(index.canonical('brick:Flux_Capacitor')).to.equal(undefined);
    expect(index.descendantsOf('brick:Flux_Capacitor').size).to.equal(0);
    expect(index.isKnown('foo:Temperature_Sensor')).to.equal(false);
  });

  it('maps deprecated classes and aliases to current ones, and counts them beneath those', function () {
    expect(index.canonical('brick:Zone_Air_Temperature_Setpoint')).to.equal(
      'brick:Target_Zone_Air_Temperature_Setpoint',
    );
    expect(
      index
        .descendantsOf('brick:Target_Zone_Air_Temperature_Setpoint')
        .has('brick:Zone_Air_Temperature_Setpoint'),
    ).to.equal(true);
    expect(index.canonical('brick:AHU')).to.equal('brick:Air_Handling_Unit');
    expect(index.descendantsOf('brick:Air_Handling_Unit').has('brick:AHU')).to.equal(true);
    expect(index.canonical('brick:Air_Handling_Unit')).to.equal('brick:Air_Handling_Unit');
  });

  it('accepts full IRIs as well as CURIEs', function () {
    expect(index.isKnown('https://brickschema.org/schema/Brick#Temperature_Sensor')).to.equal(true);
    expect(index.toCurie('https://brickschema.org/schema/Brick#VAV')).to.equal('brick:VAV');
  });

  it('knows every class the sample buildings use, each in the right branch', function () {
    for (const building of loadBuildings().buildings) {
      for (const p of building.points) expect(index.isA(p.class, 'brick:Point'), p.class).to.equal(true);
      for (const e of building.equipment) expect(index.isEquipmentOrSystem(e.class), e.class).to.equal(true);
      for (const l of building.locations) expect([...index.kindsOf(l.class)], l.class).to.include('location');
    }
  });
});
