import { expect } from 'chai';
import { startTestConnector, type TestConnector } from '../support/stack.js';
import { client } from '../support/http.js';
import { expectError } from '../support/expect-error.js';

describe('management API: keys, roles and errors', () => {
  let connector: TestConnector;
  before(async () => {
    connector = await startTestConnector({ name: 'auth' });
  });
  after(() => connector?.stop());

  const admin = () => client(connector.url, connector.adminKey);

  async function keyWithRole(role: string) {
    const res = await admin().post('/api/v1/api-keys', { name: `${role} key`, role });
    expect(res.status).to.equal(201);
    return res.body.key as string;
  }

  it('refuses a call without a key: unauthenticated', async () => {
    expectError(await client(connector.url).get('/api/v1/sources'), 401, 'unauthenticated');
  });

  it('answers an unknown key id and a wrong secret the same way', async () => {
    const [, id] = /^plk_([a-z0-9]{12})_/.exec(connector.adminKey)!;
    const wrongSecret = `plk_${id}_${'0'.repeat(48)}`;
    const unknownId = `plk_${'z'.repeat(12)}_${'0'.repeat(48)}`;
    const a = await client(connector.url, wrongSecret).get('/api/v1/sources');
    const b = await client(connector.url, unknownId).get('/api/v1/sources');
    expectError(a, 401, 'unauthenticated');
    expect(b).to.deep.include({ status: a.status, body: a.body });
  });

  it('accepts the key as Bearer or ApiKey, never in the query string', async () => {
    expect(
      (await client(connector.url).get('/api/v1/sources', { authorization: `ApiKey ${connector.adminKey}` }))
        .status,
    ).to.equal(200);
    expectError(
      await client(connector.url).get(`/api/v1/sources?api_key=${connector.adminKey}`),
      401,
      'unauthenticated',
    );
    expectError(
      await client(connector.url).get('/api/v1/sources', { authorization: 'Basic abc' }),
      401,
      'unauthenticated',
    );
  });

  it('creates keys shown once, lists them without secrets, and a revoked key stops working', async () => {
    const created = await admin().post('/api/v1/api-keys', { name: 'ops', role: 'operator' });
    expect(created.status).to.equal(201);
    expect(created.body).to.include({ name: 'ops', role: 'operator', revoked_at: null });
    expect(created.body.key).to.match(/^plk_[a-z0-9]{12}_[0-9a-f]{48}$/);
    const listed = await admin().get('/api/v1/api-keys?limit=200');
    const entry = listed.body.items.find((k: { id: string }) => k.id === created.body.id);
    expect(entry).to.include({ name: 'ops', role: 'operator' });
    expect(JSON.stringify(listed.body)).not.to.include(created.body.key.split('_')[2]);
    expect(entry).not.to.have.property('key');

    expect((await client(connector.url, created.body.key).get('/api/v1/sources')).status).to.equal(200);
    const revoked = await admin().delete(`/api/v1/api-keys/${created.body.id}`);
    expect(revoked.status).to.equal(200);
    expect(revoked.body.revoked_at).to.be.a('string');
    expectError(await client(connector.url, created.body.key).get('/api/v1/sources'), 401, 'unauthenticated');
    expectError(await admin().delete('/api/v1/api-keys/nope'), 404, 'not_found');
  });

  it('checks roles: a viewer reads but may not write; an operator may not manage keys', async () => {
    const viewer = client(connector.url, await keyWithRole('viewer'));
    const operator = client(connector.url, await keyWithRole('operator'));
    expect((await viewer.get('/api/v1/policies')).status).to.equal(200);
    expectError(await viewer.post('/api/v1/policies', { title: 'x' }), 403, 'forbidden', 'operator');
    expect((await operator.post('/api/v1/policies', { title: 'by operator' })).status).to.equal(201);
    expectError(await operator.post('/api/v1/api-keys', { name: 'x', role: 'admin' }), 403, 'forbidden');
    expectError(await operator.get('/api/v1/api-keys'), 403, 'forbidden');
  });

  it('validates key creation: unknown role is invalid_request naming the field', async () => {
    expectError(
      await admin().post('/api/v1/api-keys', { name: 'x', role: 'root' }),
      400,
      'invalid_request',
      'role',
    );
    expectError(await admin().post('/api/v1/api-keys', { role: 'viewer' }), 400, 'invalid_request', 'name');
  });

  it('answers unknown routes with not_found, inside and outside /api/v1', async () => {
    expectError(await admin().get('/api/v1/nothing-here'), 404, 'not_found');
    expectError(await admin().call('PATCH', '/api/v1/sources'), 404, 'not_found');
    expectError(await client(connector.url).get('/elsewhere'), 404, 'not_found');
  });

  it('answers malformed JSON and non-JSON bodies with invalid_request', async () => {
    expectError(await admin().post('/api/v1/policies', '{"title": '), 400, 'invalid_request');
    const text = await admin().post('/api/v1/policies', 'title=x', { 'content-type': 'text/plain' });
    expectError(text, 415, 'invalid_request', 'JSON');
  });

  it('serves an OpenAPI 3.1 document generated from the validating schemas', async () => {
    const doc = await client(connector.url).get('/api/v1/openapi.json');
    expect(doc.status).to.equal(200);
    expect(doc.body.openapi).to.equal('3.1.0');
    const post = doc.body.paths['/api/v1/sources'].post;
    expect(post.requestBody.content['application/json'].schema.required).to.include('name');
    expect(post['x-required-role']).to.equal('operator');
    expect(doc.body.paths['/api/v1/sources/{id}'].put.parameters[0]).to.include({ name: 'id', in: 'path' });
    for (const path of ['/api/v1/products', '/api/v1/offers', '/api/v1/policies/{id}', '/api/v1/api-keys']) {
      expect(doc.body.paths, path).to.have.property(path);
    }
  });
});

describe('management API: cursor paging', () => {
  let connector: TestConnector;
  before(async () => {
    connector = await startTestConnector({ name: 'paging' });
  });
  after(() => connector?.stop());

  it('walks a list in insertion order with next_cursor, null on the last page', async () => {
    const api = client(connector.url, connector.adminKey);
    const ids: string[] = [];
    for (let i = 0; i < 7; i++) {
      const res = await api.post('/api/v1/policies', { id: `p-${i}`, title: `Policy ${i}` });
      expect(res.status).to.equal(201);
      ids.push(res.body.id);
    }
    const seen: string[] = [];
    let cursor: string | null = null;
    let pages = 0;
    do {
      const res = await api.get(
        `/api/v1/policies?limit=3${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''}`,
      );
      expect(res.status).to.equal(200);
      expect(res.body).to.have.keys('items', 'next_cursor');
      expect(res.body.items.length).to.be.at.most(3);
      seen.push(...res.body.items.map((p: { id: string }) => p.id));
      cursor = res.body.next_cursor;
      pages++;
    } while (cursor);
    expect(seen).to.deep.equal(ids);
    expect(pages).to.equal(3);
  });

  it('refuses a bad cursor and an out-of-range limit with invalid_request', async () => {
    const api = client(connector.url, connector.adminKey);
    expectError(await api.get('/api/v1/policies?cursor=garbage'), 400, 'invalid_request', 'cursor');
    expectError(
      await api.get('/api/v1/sources?cursor=c1.bm90LWEtbnVtYmVy'),
      400,
      'invalid_request',
      'cursor',
    );
    expectError(await api.get('/api/v1/policies?limit=0'), 400, 'invalid_request', 'limit');
    expectError(await api.get('/api/v1/policies?limit=201'), 400, 'invalid_request', 'limit');
  });
});
