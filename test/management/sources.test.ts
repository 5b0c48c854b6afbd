import { expect } from 'chai';
import { startTestConnector, type TestConnector } from '../support/stack.js';
import { client, type Client } from '../support/http.js';
import { expectError } from '../support/expect-error.js';

const MASK = '••••••';

const binding = (extra: Record<string, unknown> = {}) => ({
  base_url: 'http://127.0.0.1:9/api',
  auth_header_name: 'X-Api-Key',
  auth_header_value: 'system-secret',
  allowed_methods: ['GET'],
  ...extra,
});

describe('management API: sources', () => {
  let connector: TestConnector;
  let api: Client;
  before(async () => {
    connector = await startTestConnector({ name: 'sources' });
    api = client(connector.url, connector.adminKey);
  });
  after(() => connector?.stop());

  it('creates a source with its id made from the name, keys masked', async () => {
    const res = await api.post('/api/v1/sources', {
      name: 'Gebouwbeheer Zuid — BMS',
      objects: ['0363.10.0000000101'],
      backend: binding(),
    });
    expect(res.status).to.equal(201);
    expect(res.body.id).to.equal('gebouwbeheer-zuid-bms');
    expect(res.body).to.include({ name: 'Gebouwbeheer Zuid — BMS', protocol: 'platform', health_path: null });
    expect(res.body.backend).to.deep.include({
      auth_header_value: MASK,
      allowed_methods: ['GET'],
      allowed_paths: [],
    });
    expect(res.body.links).to.deep.equal([]);
    expect(res.body.created_at).to.match(/^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?Z$/);
    expect(JSON.stringify(res.body)).not.to.include('system-secret');
  });

  it('uses an explicit id, and an existing id is a conflict (also when made from the name)', async () => {
    expect((await api.post('/api/v1/sources', { id: 'bms-noord', name: 'Noord' })).status).to.equal(201);
    expectError(
      await api.post('/api/v1/sources', { id: 'bms-noord', name: 'Other' }),
      409,
      'conflict',
      'bms-noord',
    );
    expectError(await api.post('/api/v1/sources', { name: 'Gebouwbeheer Zuid - BMS' }), 409, 'conflict');
  });

  it('treats an empty id as "make it from the name"', async () => {
    const res = await api.post('/api/v1/sources', { id: '', name: 'Empty Id Source' });
    expect(res.status).to.equal(201);
    expect(res.body.id).to.equal('empty-id-source');
  });

  it('refuses invalid sources with invalid_request naming the field', async () => {
    const cases: Array<[unknown, string]> = [
      [{}, 'name'],
      [{ name: '' }, 'name'],
      [{ name: 'x', protocol: 'modbus' }, 'protocol'],
      [{ name: 'x', objects: ['a', 'a'] }, 'objects[1]'],
      [{ name: 'x', backend: { allowed_methods: ['GET'] } }, 'backend.base_url'],
      [{ name: 'x', backend: binding({ base_url: 'ftp://host' }) }, 'backend.base_url'],
      [{ name: 'x', backend: binding({ allowed_methods: [] }) }, 'backend.allowed_methods'],
      [{ name: 'x', backend: binding({ allowed_methods: undefined }) }, 'backend.allowed_methods'],
      [{ name: 'x', backend: binding({ allowed_methods: ['FETCH'] }) }, 'backend.allowed_methods[0]'],
      [{ name: 'x', protocol: 'generic', backend: binding() }, 'backend.allowed_paths'],
      [{ name: 'x', protocol: 'generic', backend: binding({ allowed_paths: [] }) }, 'backend.allowed_paths'],
      [
        { name: 'x', protocol: 'generic', backend: binding({ allowed_paths: ['v1/../admin'] }) },
        'backend.allowed_paths[0]',
      ],
      [
        { name: 'x', protocol: 'generic', backend: binding({ allowed_paths: ['v1/**/x'] }) },
        'backend.allowed_paths[0]',
      ],
      [
        { name: 'x', protocol: 'generic', backend: binding({ allowed_paths: ['v1/a*'] }) },
        'backend.allowed_paths[0]',
      ],
      [{ name: 'x', backend: binding({ auth_header_name: 'bad header' }) }, 'backend.auth_header_name'],
      [{ name: 'x', backend: binding({ auth_header_value: MASK }) }, 'backend.auth_header_value'],
      [{ name: 'x', objects: ['a'], links: [{ object: 'b' }] }, 'links[0]'],
      [{ name: 'x', objects: ['a'], links: [{ object: 'a' }, { object: 'a' }] }, 'links[1].object'],
      [{ name: 'x', objects: ['a'], links: [{ object: 'a', provides: 'everything' }] }, 'links[0].provides'],
      [
        { name: 'x', objects: ['a'], backend: binding({ links: { b: { local_id: 'B' } } }) },
        'backend.links.b',
      ],
      [
        {
          name: 'x',
          objects: ['a'],
          links: [{ object: 'a', local_id: 'A1' }],
          backend: binding({ links: { a: { local_id: 'A2' } } }),
        },
        'backend.links.a',
      ],
      [{ name: 'x', unknown_field: 1 }, 'unknown_field'],
      [{ name: 'x', created_at: 'yesterday' }, 'created_at'],
    ];
    for (const [body, field] of cases) {
      const res = await api.post('/api/v1/sources', body);
      expectError(res, 400, 'invalid_request', field);
    }
  });

  it('lets a platform source leave allowed_paths out (its links fill them) and a generic one give them', async () => {
    const platform = await api.post('/api/v1/sources', {
      name: 'Platform system',
      objects: ['b1'],
      backend: binding(),
    });
    expect(platform.status).to.equal(201);
    const generic = await api.post('/api/v1/sources', {
      name: 'Generic system',
      protocol: 'generic',
      backend: binding({ allowed_paths: ['api/*/points', '**'] }),
    });
    expect(generic.status).to.equal(201);
    expect(generic.body.backend.allowed_paths).to.deep.equal(['api/*/points', '**']);
  });

  it('keeps links in both forms, lists only what differs from the defaults and masks per-building keys', async () => {
    const res = await api.post('/api/v1/sources', {
      name: 'Linked system',
      objects: ['obj-a', 'obj-b', 'obj-c', 'obj-d'],
      backend: binding({ links: { 'obj-b': { auth_header_value: 'key-for-b', provides: 'both' } } }),
      links: [
        { object: 'obj-a', local_id: 'soda-hall' },
        { object: 'obj-c', local_id: 'obj-c', provides: 'data', auth_header_value: null },
      ],
    });
    expect(res.status).to.equal(201);
    expect(res.body.links).to.deep.equal([
      { object: 'obj-a', local_id: 'soda-hall' },
      { object: 'obj-b', auth_header_value: MASK, provides: 'both' },
    ]);
    expect(res.body.backend.links).to.deep.equal({
      'obj-a': { local_id: 'soda-hall' },
      'obj-b': { auth_header_value: MASK, provides: 'both' },
    });
    expect(JSON.stringify(res.body)).not.to.include('key-for-b');
  });

  it('reads one source and lists sources with keys masked everywhere', async () => {
    const one = await api.get('/api/v1/sources/linked-system');
    expect(one.status).to.equal(200);
    expect(one.body.backend.auth_header_value).to.equal(MASK);
    const list = await api.get('/api/v1/sources?limit=200');
    expect(list.status).to.equal(200);
    expect(list.body.next_cursor).to.equal(null);
    const text = JSON.stringify(list.body);
    expect(text).not.to.include('system-secret');
    expect(text).not.to.include('key-for-b');
    expect(list.body.items.map((s: { id: string }) => s.id)).to.include.members([
      'gebouwbeheer-zuid-bms',
      'linked-system',
    ]);
    expectError(await api.get('/api/v1/sources/does-not-exist'), 404, 'not_found', 'does-not-exist');
  });

  it('replaces a source on PUT: masked keys (system and per building) keep the stored ones', async () => {
    const current = (await api.get('/api/v1/sources/linked-system')).body;
    const sent = {
      ...current,
      name: 'Linked system (renamed)',
      backend: { ...current.backend, base_url: 'http://127.0.0.1:9/v2' },
    };
    const res = await api.put('/api/v1/sources/linked-system', sent);
    expect(res.status, JSON.stringify(res.body)).to.equal(200);
    expect(res.body.name).to.equal('Linked system (renamed)');
    expect(res.body.backend.auth_header_value).to.equal(MASK);
    expect(res.body.links).to.deep.equal(current.links);
    // The stored secrets are unchanged: check the database itself.
    const row = await connector.db('sources').where({ id: 'linked-system' }).first();
    expect(row.backend.auth_header_value).to.equal('system-secret');
    expect(row.links['obj-b'].auth_header_value).to.equal('key-for-b');
    expect(row.backend.base_url).to.equal('http://127.0.0.1:9/v2');
  });

  it('replaces a key when a new one is sent, and removes it when null is sent', async () => {
    const current = (await api.get('/api/v1/sources/linked-system')).body;
    const res = await api.put('/api/v1/sources/linked-system', {
      ...current,
      backend: { ...current.backend, auth_header_value: 'rotated', links: undefined },
      links: [{ object: 'obj-a', local_id: 'soda-hall' }],
    });
    expect(res.status).to.equal(200);
    const row = await connector.db('sources').where({ id: 'linked-system' }).first();
    expect(row.backend.auth_header_value).to.equal('rotated');
    expect(row.links['obj-b'].auth_header_value).to.equal(null);
    const cleared = await api.put('/api/v1/sources/linked-system', {
      ...res.body,
      backend: { ...res.body.backend, auth_header_value: null },
    });
    expect(cleared.body.backend.auth_header_value).to.equal(null);
  });

  it('refuses a PUT for an unknown id, a differing id, and an invalid body', async () => {
    expectError(await api.put('/api/v1/sources/nope', { name: 'x' }), 404, 'not_found', 'nope');
    expectError(
      await api.put('/api/v1/sources/linked-system', { id: 'other', name: 'x' }),
      400,
      'invalid_request',
      'id',
    );
    expectError(
      await api.put('/api/v1/sources/linked-system', {
        name: 'x',
        backend: binding({ allowed_methods: [] }),
      }),
      400,
      'invalid_request',
      'backend.allowed_methods',
    );
  });

  it('answers the source test with conflict when there is no backend, and not_found for an unknown source', async () => {
    expectError(await api.post('/api/v1/sources/bms-noord/test'), 409, 'conflict', 'no backend');
    expectError(await api.post('/api/v1/sources/nope/test'), 404, 'not_found');
  });

  it('reports an unreachable system in the source test', async () => {
    const res = await api.post('/api/v1/sources/gebouwbeheer-zuid-bms/test');
    expect(res.status).to.equal(200);
    expect(res.body).to.include({ source_id: 'gebouwbeheer-zuid-bms', reachable: false, status: null });
    expect(res.body.error).to.be.a('string').and.not.empty;
    expect(res.body.latency_ms).to.be.a('number');
  });
});
