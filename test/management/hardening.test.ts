/** Edge cases found in review: key destinations, path-safe ids, bad bytes, misbehaving backends. */
import { expect } from 'chai';
import http from 'node:http';
import { gzipSync } from 'node:zlib';
import { startTestConnector, type TestConnector } from '../support/stack.js';
import { client, type Client } from '../support/http.js';
import { expectError } from '../support/expect-error.js';

const MASK = '••••••';

/** A backend that answers /v1/buildings/x/points in the way the test asks for. */
async function misbehavingBackend(answer: (res: http.ServerResponse) => void) {
  const server = http.createServer((req, res) => answer(res));
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  const { port } = server.address() as { port: number };
  return { url: `http://127.0.0.1:${port}`, close: () => new Promise((r) => server.close(r)) };
}

describe('management API: hardening', () => {
  let connector: TestConnector;
  let api: Client;
  before(async () => {
    connector = await startTestConnector({ name: 'hardening' });
    api = client(connector.url, connector.adminKey);
    const res = await api.post('/api/v1/sources', {
      id: 'keyed',
      name: 'Keyed',
      objects: ['b1'],
      backend: {
        base_url: 'http://127.0.0.1:9/api',
        auth_header_name: 'X-Key',
        auth_header_value: 'secret-1',
        allowed_methods: ['GET'],
      },
      links: [{ object: 'b1', auth_header_value: 'secret-b1' }],
    });
    expect(res.status).to.equal(201);
  });
  after(() => connector?.stop());

  it('refuses a masked key whose destination changed (another origin or header): the key must be sent again', async () => {
    const current = (await api.get('/api/v1/sources/keyed')).body;
    const elsewhere = {
      ...current,
      backend: { ...current.backend, base_url: 'http://attacker.example:8080/api' },
    };
    expectError(
      await api.put('/api/v1/sources/keyed', elsewhere),
      400,
      'invalid_request',
      'backend.auth_header_value: is masked, but the key would now go elsewhere',
    );
    const otherHeader = { ...current, backend: { ...current.backend, auth_header_name: 'X-Other' } };
    expectError(
      await api.put('/api/v1/sources/keyed', otherHeader),
      400,
      'invalid_request',
      'backend.auth_header_value',
    );
    // The system key sent anew, the per-building key still masked: refused for that link too.
    const newSystemKey = {
      ...current,
      backend: { ...current.backend, base_url: 'http://other.example/api', auth_header_value: 'secret-2' },
    };
    expectError(
      await api.put('/api/v1/sources/keyed', newSystemKey),
      400,
      'invalid_request',
      'auth_header_value: is masked, but the key would now go elsewhere',
    );
    const row = await connector.db('sources').where({ id: 'keyed' }).first();
    expect(row.backend.base_url).to.equal('http://127.0.0.1:9/api');
  });

  it('keeps ids path-safe: no wildcards, slashes or dot segments in objects and local ids', async () => {
    const base = { name: 'x', backend: { base_url: 'http://127.0.0.1:9', allowed_methods: ['GET'] } };
    expectError(
      await api.post('/api/v1/sources', { ...base, objects: ['**'] }),
      400,
      'invalid_request',
      'objects[0]',
    );
    expectError(
      await api.post('/api/v1/sources', { ...base, objects: ['a/b'] }),
      400,
      'invalid_request',
      'objects[0]',
    );
    expectError(
      await api.post('/api/v1/sources', { ...base, objects: ['..'] }),
      400,
      'invalid_request',
      'objects[0]',
    );
    expectError(
      await api.post('/api/v1/sources', { ...base, objects: ['a'], links: [{ object: 'a', local_id: '*' }] }),
      400,
      'invalid_request',
      'links[0].local_id',
    );
    expectError(
      await api.post('/api/v1/sources', {
        ...base,
        objects: ['a'],
        backend: { ...base.backend, links: { a: { local_id: 'x/../y' } } },
      }),
      400,
      'invalid_request',
      'backend.links.a.local_id',
    );
  });

  it('refuses credentials in base_url and a health_path that leaves the base URL', async () => {
    const base = { name: 'x', backend: { base_url: 'http://user:pw@127.0.0.1:9', allowed_methods: ['GET'] } };
    expectError(
      await api.post('/api/v1/sources', base),
      400,
      'invalid_request',
      'backend.base_url: must not carry credentials',
    );
    for (const health_path of ['../admin', 'http://elsewhere/health', '//elsewhere/x', 'v1/%2e%2e/x']) {
      expectError(
        await api.post('/api/v1/sources', { name: 'x', health_path }),
        400,
        'invalid_request',
        'health_path',
      );
    }
    expect(
      (await api.post('/api/v1/sources', { name: 'healthy', health_path: 'v1/health?deep=1' })).status,
    ).to.equal(201);
  });

  it('answers a NUL character and an undecodable body with invalid_request, not internal', async () => {
    expectError(await api.post('/api/v1/sources', { name: 'a\u0000b' }), 400, 'invalid_request');
    expectError(await api.post('/api/v1/policies', { title: 'nul in json \u0000' }), 400, 'invalid_request');
    const res = await fetch(`${connector.url}/api/v1/policies`, {
      method: 'POST',
      headers: {
        authorization: `Bearer ${connector.adminKey}`,
        'content-type': 'application/json',
        'content-encoding': 'gzip',
      },
      body: 'definitely not gzip',
    });
    expectError(
      { status: res.status, headers: res.headers, body: await res.json() },
      400,
      'invalid_request',
      'Content-Encoding',
    );
    const gz = await fetch(`${connector.url}/api/v1/policies`, {
      method: 'POST',
      headers: {
        authorization: `Bearer ${connector.adminKey}`,
        'content-type': 'application/json',
        'content-encoding': 'gzip',
      },
      body: gzipSync(JSON.stringify({ id: 'gzipped' })),
    });
    expect(gz.status).to.equal(201);
  });

  it('refuses anonymous calls before reading their body', async () => {
    expectError(await client(connector.url).post('/api/v1/policies', '{"broken'), 401, 'unauthenticated');
    expectError(
      await client(connector.url).post('/api/v1/policies', 'x', { 'content-type': 'text/plain' }),
      401,
      'unauthenticated',
    );
  });

  it('answers upstream_unavailable (never internal) when a backend answers nonsense while points are resolved', async () => {
    const answers: Array<[string, (res: http.ServerResponse) => void, number, string]> = [
      [
        'null body',
        (res) => res.writeHead(200, { 'content-type': 'application/json' }).end('null'),
        502,
        'upstream_unavailable',
      ],
      [
        'not JSON',
        (res) => res.writeHead(200, { 'content-type': 'application/json' }).end('<html>'),
        502,
        'upstream_unavailable',
      ],
      [
        'cut mid-answer',
        (res) => {
          res.writeHead(200, { 'content-type': 'application/json', 'content-length': '1000' });
          res.write('{"points":[');
          setTimeout(() => res.destroy(), 20);
        },
        502,
        'upstream_unavailable',
      ],
      // Read fine, but entries that are not points name no point: the chosen one is unknown.
      [
        'null entries',
        (res) => res.writeHead(200, { 'content-type': 'application/json' }).end('{"points":[null]}'),
        400,
        'invalid_request',
      ],
    ];
    for (const [what, answer, status, code] of answers) {
      const backend = await misbehavingBackend(answer);
      try {
        const res = await api.post('/api/v1/products', {
          title: `Nonsense ${what}`,
          objects: ['x'],
          backend: { base_url: backend.url, allowed_methods: ['GET'], allowed_paths: ['**'] },
          selection: { kind: 'points' },
          points: ['p1'],
        });
        expectError(res, status, code);
      } finally {
        await backend.close();
      }
    }
  });

  it('refuses a points selection that the binding cannot list (generic source, no GET)', async () => {
    const generic = await api.post('/api/v1/sources', {
      id: 'generic',
      name: 'Generic',
      protocol: 'generic',
      objects: ['g1'],
      backend: { base_url: 'http://127.0.0.1:9', allowed_methods: ['GET'], allowed_paths: ['api/**'] },
    });
    expect(generic.status).to.equal(201);
    expectError(
      await api.post('/api/v1/products', {
        title: 'G',
        objects: ['g1'],
        source_id: 'generic',
        selection: { kind: 'points' },
        points: ['p'],
      }),
      400,
      'invalid_request',
      'selection',
    );
    expectError(
      await api.post('/api/v1/products', {
        title: 'Post only',
        objects: ['o'],
        backend: { base_url: 'http://127.0.0.1:9', allowed_methods: ['POST'], allowed_paths: ['**'] },
        selection: { kind: 'points' },
        points: ['p'],
      }),
      400,
      'invalid_request',
      'allows GET',
    );
  });

  it("refuses a changed own backend on PUT: a product's delivery stays as it is", async () => {
    const created = await api.post('/api/v1/products', {
      id: 'own',
      title: 'Own',
      objects: ['o'],
      backend: {
        base_url: 'http://127.0.0.1:9',
        auth_header_name: 'X-Key',
        auth_header_value: 'k',
        allowed_methods: ['GET'],
        allowed_paths: ['**'],
      },
    });
    expect(created.status).to.equal(201);
    expect(created.body.backend.auth_header_value).to.equal(MASK);
    const changed = { ...created.body, backend: { ...created.body.backend, allowed_paths: ['v2/**'] } };
    expectError(
      await api.put('/api/v1/products/own', changed),
      400,
      'invalid_request',
      'backend: the delivery of a product stays as it is',
    );
    const { backend: _b, ...without } = created.body;
    expect(
      (await api.put('/api/v1/products/own', { ...without, title: 'Own (renamed)' })).body.backend,
    ).to.deep.equal(created.body.backend);
  });

  it('keeps manual approval when a PUT leaves approval out, and refuses a PUT naming a missing policy', async () => {
    expect((await api.post('/api/v1/policies', { id: 'pol' })).status).to.equal(201);
    const offer = { asset_id: 'own', access_policy_id: 'pol', contract_policy_id: 'pol' };
    expect(
      (await api.post('/api/v1/offers', { ...offer, id: 'manual-offer', approval: 'manual' })).status,
    ).to.equal(201);
    const kept = await api.put('/api/v1/offers/manual-offer', offer);
    expect(kept.status).to.equal(200);
    expect(kept.body.approval).to.equal('manual');
    expectError(
      await api.put('/api/v1/offers/manual-offer', { ...offer, contract_policy_id: 'gone' }),
      400,
      'invalid_request',
      'contract_policy_id',
    );
  });

  it('builds the policy summary from its parts, whatever the values say', async () => {
    const res = await api.post('/api/v1/policies', {
      id: 'tricky',
      permissions: [
        {
          action: 'use',
          constraints: [{ left_operand: 'pl:role', operator: 'eq', right_operand: 'x use y' }],
        },
      ],
    });
    expect(res.body.summary).to.equal('Participants holding the role x use y may use the data.');
  });

  it('walks every list with cursors', async () => {
    for (const path of [
      '/api/v1/sources',
      '/api/v1/products',
      '/api/v1/offers',
      '/api/v1/policies',
      '/api/v1/api-keys',
    ]) {
      const all = (await api.get(`${path}?limit=200`)).body.items as Array<{ id: string }>;
      expect(all.length, path).to.be.at.least(1);
      const walked: string[] = [];
      let cursor: string | null = null;
      do {
        const page = await api.get(`${path}?limit=1${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''}`);
        expect(page.status, path).to.equal(200);
        walked.push(...page.body.items.map((i: { id: string }) => i.id));
        cursor = page.body.next_cursor;
      } while (cursor);
      expect(walked, path).to.deep.equal(all.map((i) => i.id));
    }
  });

  it('documents the map form of links in the OpenAPI document', async () => {
    const doc = (await client(connector.url).get('/api/v1/openapi.json')).body;
    const links =
      doc.paths['/api/v1/sources'].post.requestBody.content['application/json'].schema.properties.backend
        .properties.links;
    expect(links.patternProperties).to.be.an('object');
    expect(Object.values(links.patternProperties)[0]).to.have.nested.property('properties.local_id');
    expect(Object.keys(links.properties ?? {})).to.deep.equal([]);
  });
});
