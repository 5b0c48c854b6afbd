import { expect } from 'chai';
import { startTestConnector, type TestConnector } from '../support/stack.js';
import { client, type Client } from '../support/http.js';
import { expectError } from '../support/expect-error.js';
import { startBuildingBackend, type RunningBuildingBackend } from '../../dev/building-backend/index.js';
import { DATA_PROFILE, TOPOLOGY_PROFILE } from '../../domain/profiles.js';

const MASK = '••••••';
const SODA = '0363.10.0000000101';
const RICE = '0363.10.0000000102';

describe('management API: products (with the sample building backend)', () => {
  let connector: TestConnector;
  let backend: RunningBuildingBackend;
  let api: Client;
  let sodaPoints: string[];
  let ricePoints: string[];

  before(async () => {
    // The system key may only read Rice Hall; Soda Hall needs its own per-building key.
    backend = await startBuildingBackend({
      keys: { 'system-key': ['rice-hall'], 'soda-key': ['soda-hall'] },
    });
    connector = await startTestConnector({ name: 'products' });
    api = client(connector.url, connector.adminKey);
    const source = await api.post('/api/v1/sources', {
      id: 'campus-bms',
      name: 'Campus BMS',
      health_path: 'v1/health',
      objects: [SODA, RICE, 'unused-object', 'layout-only'],
      backend: {
        base_url: backend.url,
        auth_header_name: 'X-Api-Key',
        auth_header_value: 'system-key',
        allowed_methods: ['GET'],
      },
      links: [
        { object: SODA, local_id: 'soda-hall', auth_header_value: 'soda-key' },
        { object: RICE, local_id: 'rice-hall' },
        { object: 'layout-only', local_id: 'rice-hall', provides: 'topology' },
      ],
    });
    expect(source.status, JSON.stringify(source.body)).to.equal(201);
    const read = async (local: string, key: string) =>
      (
        (await (
          await fetch(`${backend.url}/v1/buildings/${local}/points`, { headers: { 'x-api-key': key } })
        ).json()) as { points: Array<{ point_id: string }> }
      ).points.map((p) => p.point_id);
    sodaPoints = await read('soda-hall', 'soda-key');
    ricePoints = await read('rice-hall', 'system-key');
  });
  after(async () => {
    await connector?.stop();
    await backend?.close();
  });

  it('tests the source system against its health path: reachable, status, latency', async () => {
    const res = await api.post('/api/v1/sources/campus-bms/test');
    expect(res.status).to.equal(200);
    expect(res.body).to.include({
      reachable: true,
      status: 200,
      error: null,
      url: `${backend.url}/v1/health`,
    });
    expect(res.body.latency_ms).to.be.a('number').at.least(0);
  });

  it('creates an all-points product: id from the title, building_id first object, derived sort and profile', async () => {
    const res = await api.post('/api/v1/products', {
      title: 'Soda Hall — all sensors',
      description: 'Everything the BMS knows',
      keywords: ['hvac', 'campus'],
      objects: [SODA, RICE],
      building_id: 'ignored-because-objects-wins',
      source_id: 'campus-bms',
    });
    expect(res.status, JSON.stringify(res.body)).to.equal(201);
    expect(res.body).to.deep.include({
      id: 'soda-hall-all-sensors',
      title: 'Soda Hall — all sensors',
      building_id: SODA,
      objects: [SODA, RICE],
      selection: { kind: 'all' },
      points: null,
      points_resolved_at: null,
      content_type: 'application/json',
      profile: DATA_PROFILE,
      sort: 'All points of 2 buildings',
      source_id: 'campus-bms',
      delegation_id: null,
    });
    // The binding that delivers it is its source's, key masked.
    expect(res.body.backend).to.deep.equal({
      base_url: backend.url,
      auth_header_name: 'X-Api-Key',
      auth_header_value: MASK,
      allowed_methods: ['GET'],
      allowed_paths: [],
    });
    expect(res.body.delivery).to.deep.include({
      mode: 'own',
      source_name: 'Campus BMS',
      delegation_id: null,
    });
  });

  it('takes building_id as the single object when objects is left out', async () => {
    const res = await api.post('/api/v1/products', {
      id: 'rice-only',
      title: 'Rice',
      building_id: RICE,
      source_id: 'campus-bms',
    });
    expect(res.status).to.equal(201);
    expect(res.body).to.deep.include({
      objects: [RICE],
      building_id: RICE,
      sort: 'All points of 1 building',
    });
  });

  it('serves the topology profile when the links of its objects only provide topology', async () => {
    const res = await api.post('/api/v1/products', {
      id: 'layout',
      title: 'Layout',
      objects: ['layout-only'],
      source_id: 'campus-bms',
    });
    expect(res.status).to.equal(201);
    expect(res.body).to.include({ profile: TOPOLOGY_PROFILE, sort: 'Building topology' });
  });

  it('resolves a points selection from the backend at write time, using local ids and per-building keys', async () => {
    const chosen = [sodaPoints[0]!, sodaPoints[5]!, ricePoints[3]!];
    const before = Date.now();
    const res = await api.post('/api/v1/products', {
      id: 'chosen-points',
      title: 'Chosen points',
      objects: [SODA, RICE],
      selection: { kind: 'points' },
      points: chosen,
      source_id: 'campus-bms',
    });
    expect(res.status, JSON.stringify(res.body)).to.equal(201);
    expect(res.body.selection).to.deep.equal({ kind: 'points' });
    expect(res.body.points).to.deep.equal(chosen);
    expect(Date.parse(res.body.points_resolved_at)).to.be.within(before - 1000, Date.now() + 1000);
    expect(res.body.sort).to.equal('3 selected points of 2 buildings');
  });

  it('accepts the chosen points inside the selection too', async () => {
    const res = await api.post('/api/v1/products', {
      id: 'chosen-in-selection',
      title: 'In selection',
      objects: [RICE],
      selection: { kind: 'points', points: [ricePoints[0]] },
      source_id: 'campus-bms',
    });
    expect(res.status, JSON.stringify(res.body)).to.equal(201);
    expect(res.body.points).to.deep.equal([ricePoints[0]]);
  });

  it('refuses a chosen point the backend does not know, naming it', async () => {
    const res = await api.post('/api/v1/products', {
      title: 'Bad point',
      objects: [RICE],
      selection: { kind: 'points' },
      points: [ricePoints[0], 'no-such-point'],
      source_id: 'campus-bms',
    });
    expectError(res, 400, 'invalid_request', "points[1]: no point 'no-such-point'");
  });

  it('fails with upstream_unavailable when the points cannot be read from the source', async () => {
    // Soda Hall through a source whose only key is the system key, which may not read Soda Hall.
    const src = await api.post('/api/v1/sources', {
      id: 'wrong-key-bms',
      name: 'Wrong key',
      objects: [SODA],
      backend: {
        base_url: backend.url,
        auth_header_name: 'X-Api-Key',
        auth_header_value: 'system-key',
        allowed_methods: ['GET'],
      },
      links: [{ object: SODA, local_id: 'soda-hall' }],
    });
    expect(src.status).to.equal(201);
    const res = await api.post('/api/v1/products', {
      title: 'Forbidden points',
      objects: [SODA],
      selection: { kind: 'points' },
      points: [sodaPoints[0]],
      source_id: 'wrong-key-bms',
    });
    expectError(res, 502, 'upstream_unavailable', '403');

    const dead = await api.post('/api/v1/sources', {
      id: 'dead-bms',
      name: 'Dead',
      objects: [SODA],
      backend: { base_url: 'http://127.0.0.1:9', allowed_methods: ['GET'] },
    });
    expect(dead.status).to.equal(201);
    const down = await api.post('/api/v1/products', {
      title: 'Unreachable',
      objects: [SODA],
      selection: { kind: 'points' },
      points: ['x'],
      source_id: 'dead-bms',
    });
    expectError(down, 502, 'upstream_unavailable', "source 'dead-bms'");
    expect(
      (await api.get('/api/v1/products?limit=200')).body.items.map((p: { title: string }) => p.title),
    ).not.to.include('Unreachable');
  });

  it('keeps the point list of an unchanged selection on PUT without asking the backend again', async () => {
    const current = (await api.get('/api/v1/products/chosen-points')).body;
    await backend.close(); // the backend is gone: only an unchanged selection can succeed now
    try {
      const res = await api.put('/api/v1/products/chosen-points', {
        ...current,
        title: 'Chosen points (renamed)',
      });
      expect(res.status, JSON.stringify(res.body)).to.equal(200);
      expect(res.body).to.deep.include({
        title: 'Chosen points (renamed)',
        points: current.points,
        points_resolved_at: current.points_resolved_at,
      });
      const changed = await api.put('/api/v1/products/chosen-points', {
        ...current,
        points: [sodaPoints[0]],
      });
      expectError(changed, 502, 'upstream_unavailable');
      expect((await api.get('/api/v1/products/chosen-points')).body.points).to.deep.equal(current.points);
    } finally {
      backend = await startBuildingBackend(
        { keys: { 'system-key': ['rice-hall'], 'soda-key': ['soda-hall'] } },
        Number(new URL(backend.url).port),
      );
    }
  });

  it('re-resolves a changed selection on PUT', async () => {
    const current = (await api.get('/api/v1/products/chosen-points')).body;
    const res = await api.put('/api/v1/products/chosen-points', { ...current, points: [sodaPoints[1]] });
    expect(res.status, JSON.stringify(res.body)).to.equal(200);
    expect(res.body.points).to.deep.equal([sodaPoints[1]]);
    expect(res.body.points_resolved_at).not.to.equal(current.points_resolved_at);
  });

  it('keeps the delivery on PUT: source_id left out stays, another source is refused', async () => {
    const current = (await api.get('/api/v1/products/rice-only')).body;
    const { source_id: _s, delivery: _d, ...withoutSource } = current;
    const kept = await api.put('/api/v1/products/rice-only', { ...withoutSource, title: 'Rice (renamed)' });
    expect(kept.status, JSON.stringify(kept.body)).to.equal(200);
    expect(kept.body).to.include({ source_id: 'campus-bms', title: 'Rice (renamed)' });
    expect(kept.body.delivery.source_name).to.equal('Campus BMS');
    expectError(
      await api.put('/api/v1/products/rice-only', { ...current, source_id: 'dead-bms' }),
      400,
      'invalid_request',
      'source_id',
    );
    expectError(
      await api.put('/api/v1/products/rice-only', { ...current, delegation_id: 'urn:uuid:x' }),
      400,
      'invalid_request',
      'delegation_id',
    );
  });

  it('reads a product with its offers, lists products, and answers unknown ids with not_found', async () => {
    const one = await api.get('/api/v1/products/rice-only');
    expect(one.status).to.equal(200);
    expect(one.body.offers).to.deep.equal([]);
    const list = await api.get('/api/v1/products?limit=2');
    expect(list.body.items).to.have.length(2);
    expect(list.body.next_cursor).to.be.a('string');
    expect(list.body.items[0]).not.to.have.property('offers');
    expectError(await api.get('/api/v1/products/nope'), 404, 'not_found');
    expectError(await api.put('/api/v1/products/nope', { title: 'x', objects: [RICE] }), 404, 'not_found');
  });

  it('refuses an existing product id with conflict', async () => {
    expectError(
      await api.post('/api/v1/products', {
        id: 'rice-only',
        title: 'x',
        objects: [RICE],
        source_id: 'campus-bms',
      }),
      409,
      'conflict',
    );
    // An id made from the title collides the same way.
    expectError(
      await api.post('/api/v1/products', { title: 'Rice only', objects: [RICE], source_id: 'campus-bms' }),
      409,
      'conflict',
      'rice-only',
    );
  });

  it('validates products, naming the field', async () => {
    const ok = { title: 'T', objects: [RICE], source_id: 'campus-bms' };
    const cases: Array<[unknown, string]> = [
      [{ objects: [RICE], source_id: 'campus-bms' }, 'title'],
      [{ ...ok, objects: [], building_id: null }, 'objects'],
      [{ title: 'T', source_id: 'campus-bms' }, 'objects'],
      [{ ...ok, objects: ['not-served'] }, 'objects[0]'],
      [{ title: 'T', building_id: 'not-served', source_id: 'campus-bms' }, 'building_id'],
      [{ ...ok, source_id: 'no-source' }, 'source_id'],
      [{ title: 'T', objects: [RICE] }, 'source_id'],
      [{ ...ok, selection: { kind: 'some' } }, 'selection.kind'],
      [{ ...ok, selection: { kind: 'points' } }, 'points'],
      [{ ...ok, selection: { kind: 'all' }, points: ['a'] }, 'points'],
      [{ ...ok, content_type: 'json' }, 'content_type'],
      [{ ...ok, profile: 'https://example.org/other' }, 'profile'],
      [{ ...ok, delegation_id: 'urn:uuid:0f8fad5b-d9cb-469f-a165-70867728950e' }, 'delegation_id'],
      [{ ...ok, keywords: 'hvac' }, 'keywords'],
      [
        {
          title: 'T',
          objects: [RICE],
          backend: { base_url: 'http://x', allowed_methods: [], allowed_paths: ['**'] },
        },
        'backend.allowed_methods',
      ],
      [
        { ...ok, backend: { base_url: 'http://x', allowed_methods: ['GET'], allowed_paths: ['**'] } },
        'backend: give one way of delivery',
      ],
      [
        {
          title: 'T',
          objects: [RICE],
          backend: {
            base_url: 'http://x',
            allowed_methods: ['GET'],
            allowed_paths: ['**'],
            links: { a: {} },
          },
        },
        'backend.links',
      ],
      [
        {
          title: 'T',
          objects: [RICE],
          backend: { base_url: 'http://u:p@x', allowed_methods: ['GET'], allowed_paths: ['**'] },
        },
        'backend.base_url',
      ],
    ];
    for (const [body, field] of cases)
      expectError(await api.post('/api/v1/products', body), 400, 'invalid_request', field);
  });

  it("masks a product's own backend key, and a masked key sent back keeps it", async () => {
    const res = await api.post('/api/v1/products', {
      id: 'own-backend',
      title: 'Own backend',
      objects: ['rice-hall'],
      content_type: 'application/ld+json',
      backend: {
        base_url: backend.url,
        auth_header_name: 'X-Api-Key',
        auth_header_value: 'system-key',
        allowed_methods: ['GET'],
        allowed_paths: ['v1/**'],
      },
      selection: { kind: 'points' },
      points: [ricePoints[2]],
    });
    expect(res.status, JSON.stringify(res.body)).to.equal(201);
    expect(res.body.backend.auth_header_value).to.equal(MASK);
    expect(res.body.content_type).to.equal('application/ld+json');
    expect(res.body.delivery).to.deep.include({ mode: 'own', source_name: null });
    const again = await api.put('/api/v1/products/own-backend', { ...res.body, description: 'same key' });
    expect(again.status, JSON.stringify(again.body)).to.equal(200);
    const row = await connector.db('products').where({ id: 'own-backend' }).first();
    expect(row.backend.auth_header_value).to.equal('system-key');
  });

  it('refuses a source change that drops an object a product uses (conflict); other changes pass', async () => {
    const source = (await api.get('/api/v1/sources/campus-bms')).body;
    const dropRice = await api.put('/api/v1/sources/campus-bms', {
      ...source,
      objects: [SODA, 'unused-object', 'layout-only'],
      links: source.links.filter((l: { object: string }) => l.object !== RICE),
      backend: { ...source.backend, links: undefined },
    });
    expectError(dropRice, 409, 'conflict', 'rice-only');
    const dropUnused = await api.put('/api/v1/sources/campus-bms', {
      ...source,
      objects: [SODA, RICE, 'layout-only'],
    });
    expect(dropUnused.status, JSON.stringify(dropUnused.body)).to.equal(200);
    expect(dropUnused.body.objects).to.deep.equal([SODA, RICE, 'layout-only']);
  });
});
