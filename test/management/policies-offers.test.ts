import { expect } from 'chai';
import { startTestConnector, type TestConnector } from '../support/stack.js';
import { client, type Client } from '../support/http.js';
import { expectError } from '../support/expect-error.js';

describe('management API: policies', () => {
  let connector: TestConnector;
  let api: Client;
  before(async () => {
    connector = await startTestConnector({ name: 'policies' });
    api = client(connector.url, connector.adminKey);
  });
  after(() => connector?.stop());

  const research = {
    title: 'Research use by members until 2027',
    description: 'For universities',
    permissions: [
      {
        action: 'use',
        constraints: [
          { left_operand: 'pl:membership', operator: 'eq', right_operand: 'active' },
          { left_operand: 'pl:role', operator: 'isAnyOf', right_operand: ['researcher', 'operator'] },
          { left_operand: 'odrl:dateTime', operator: 'lt', right_operand: '2027-01-01T00:00:00Z' },
          { left_operand: 'odrl:purpose', operator: 'eq', right_operand: 'research' },
        ],
      },
    ],
    prohibitions: [{ action: 'write', constraints: [] }],
    obligations: [
      {
        action: 'use',
        constraints: [{ left_operand: 'pl:signedRequests', operator: 'eq', right_operand: true }],
      },
    ],
  };

  it('creates a policy with its id from the title, its ODRL form and a readable summary', async () => {
    const res = await api.post('/api/v1/policies', research);
    expect(res.status).to.equal(201);
    expect(res.body.id).to.equal('research-use-by-members-until-2027');
    expect(res.body.permissions).to.deep.equal(research.permissions);
    expect(res.body.odrl).to.deep.include({ '@id': res.body.id, '@type': 'Set' });
    expect(res.body.odrl['@context']).to.include('https://w3id.org/dspace/2025/1/context.jsonld');
    expect(res.body.odrl.permission[0]).to.deep.equal({
      action: 'use',
      constraint: [
        { leftOperand: 'pl:membership', operator: 'eq', rightOperand: 'active' },
        { leftOperand: 'pl:role', operator: 'isAnyOf', rightOperand: ['researcher', 'operator'] },
        {
          leftOperand: 'odrl:dateTime',
          operator: 'lt',
          rightOperand: { '@value': '2027-01-01T00:00:00Z', '@type': 'xsd:dateTime' },
        },
        { leftOperand: 'odrl:purpose', operator: 'eq', rightOperand: 'research' },
      ],
    });
    expect(res.body.odrl.prohibition).to.deep.equal([{ action: 'write' }]);
    expect(res.body.summary).to.equal(
      'Participants with active membership and holding the role researcher or operator may use the data until 2027-01-01T00:00:00Z for the purpose research. ' +
        'Any participant may not write the data. Any participant must use with signed requests.',
    );
  });

  it('reads and lists policies; unknown id is not_found', async () => {
    const one = await api.get('/api/v1/policies/research-use-by-members-until-2027');
    expect(one.status).to.equal(200);
    expect(one.body.summary).to.be.a('string').and.not.empty;
    const list = await api.get('/api/v1/policies');
    expect(list.body.items.map((p: { id: string }) => p.id)).to.include('research-use-by-members-until-2027');
    expectError(await api.get('/api/v1/policies/nope'), 404, 'not_found', 'nope');
  });

  it('makes an id when there is neither id nor title, and an existing id is a conflict', async () => {
    const res = await api.post('/api/v1/policies', { permissions: [{ action: 'use' }] });
    expect(res.status).to.equal(201);
    expect(res.body.id).to.match(/^policy-[0-9a-f-]{36}$/);
    expect(res.body.summary).to.equal('Any participant may use the data.');
    expectError(await api.post('/api/v1/policies', { id: res.body.id }), 409, 'conflict');
  });

  it('validates rules and constraints, naming the field', async () => {
    const c = (constraint: Record<string, unknown>) => ({
      permissions: [{ action: 'use', constraints: [constraint] }],
    });
    const cases: Array<[unknown, string]> = [
      [{ permissions: [{}] }, 'permissions[0].action'],
      [{ permissions: [{ action: 'sell' }] }, 'permissions[0].action'],
      [
        c({ left_operand: 'pl:color', operator: 'eq', right_operand: 'x' }),
        'permissions[0].constraints[0].left_operand',
      ],
      [
        c({ left_operand: 'pl:role', operator: 'like', right_operand: 'x' }),
        'permissions[0].constraints[0].operator',
      ],
      [c({ left_operand: 'pl:role', operator: 'eq' }), 'permissions[0].constraints[0].right_operand'],
      [
        c({ left_operand: 'pl:role', operator: 'eq', right_operand: 5 }),
        'permissions[0].constraints[0].right_operand',
      ],
      [
        c({ left_operand: 'pl:role', operator: 'isAnyOf', right_operand: 'x' }),
        'permissions[0].constraints[0]',
      ],
      [
        c({ left_operand: 'pl:role', operator: 'isAnyOf', right_operand: [] }),
        'permissions[0].constraints[0]',
      ],
      [c({ left_operand: 'pl:role', operator: 'eq', right_operand: ['a'] }), 'permissions[0].constraints[0]'],
      [c({ left_operand: 'pl:role', operator: 'lt', right_operand: 'a' }), 'permissions[0].constraints[0]'],
      [
        c({ left_operand: 'odrl:dateTime', operator: 'lt', right_operand: '2027-01-01' }),
        'permissions[0].constraints[0]',
      ],
      [
        c({ left_operand: 'odrl:dateTime', operator: 'isAnyOf', right_operand: ['2027-01-01T00:00:00Z'] }),
        'permissions[0].constraints[0]',
      ],
      [
        c({ left_operand: 'pl:signedRequests', operator: 'eq', right_operand: 'yes' }),
        'permissions[0].constraints[0]',
      ],
      [
        c({ left_operand: 'pl:signedRequests', operator: 'isNoneOf', right_operand: ['true'] }),
        'permissions[0].constraints[0]',
      ],
      [
        c({ left_operand: 'pl:membership', operator: 'eq', right_operand: true }),
        'permissions[0].constraints[0]',
      ],
      [
        {
          prohibitions: [
            {
              action: 'use',
              constraints: [{ left_operand: 'odrl:purpose', operator: 'gt', right_operand: 'x' }],
            },
          ],
        },
        'prohibitions[0].constraints[0]',
      ],
    ];
    for (const [body, field] of cases)
      expectError(await api.post('/api/v1/policies', body), 400, 'invalid_request', field);
  });

  it('accepts every left operand with a fitting operator', async () => {
    const res = await api.post('/api/v1/policies', {
      id: 'all-operands',
      permissions: [
        {
          action: 'read',
          constraints: [
            { left_operand: 'pl:participant', operator: 'isNoneOf', right_operand: ['did:web:bad.example'] },
            { left_operand: 'odrl:dateTime', operator: 'gteq', right_operand: '2026-01-01T00:00:00+01:00' },
            { left_operand: 'pl:signedRequests', operator: 'eq', right_operand: false },
            { left_operand: 'odrl:purpose', operator: 'isAnyOf', right_operand: ['research', 'maintenance'] },
          ],
        },
      ],
    });
    expect(res.status, JSON.stringify(res.body)).to.equal(201);
    expect(res.body.summary).to.equal(
      'Participants other than did:web:bad.example may read the data from 2026-01-01T00:00:00+01:00 without signed requests for the purpose research or maintenance.',
    );
  });
});

describe('management API: offers', () => {
  let connector: TestConnector;
  let api: Client;
  before(async () => {
    connector = await startTestConnector({ name: 'offers' });
    api = client(connector.url, connector.adminKey);
    // A product with its own backend (no points to resolve), and two policies.
    const product = await api.post('/api/v1/products', {
      id: 'prod-1',
      title: 'Product one',
      objects: ['b-1'],
      backend: { base_url: 'http://127.0.0.1:9', allowed_methods: ['GET'], allowed_paths: ['**'] },
    });
    expect(product.status, JSON.stringify(product.body)).to.equal(201);
    expect(
      (await api.post('/api/v1/policies', { id: 'access', permissions: [{ action: 'use' }] })).status,
    ).to.equal(201);
    expect(
      (await api.post('/api/v1/policies', { id: 'contract', permissions: [{ action: 'read' }] })).status,
    ).to.equal(201);
  });
  after(() => connector?.stop());

  const offer = { asset_id: 'prod-1', access_policy_id: 'access', contract_policy_id: 'contract' };

  it('creates an offer with a made id and automatic approval by default', async () => {
    const res = await api.post('/api/v1/offers', offer);
    expect(res.status).to.equal(201);
    expect(res.body.id).to.match(/^offer-[0-9a-f-]{36}$/);
    expect(res.body).to.include({ ...offer, approval: 'automatic' });
    expect(res.body.created_at).to.be.a('string');
  });

  it('creates an offer with its own id and manual approval; an existing id is a conflict', async () => {
    const res = await api.post('/api/v1/offers', { ...offer, id: 'offer-manual', approval: 'manual' });
    expect(res.status).to.equal(201);
    expect(res.body).to.include({ id: 'offer-manual', approval: 'manual' });
    expectError(await api.post('/api/v1/offers', { ...offer, id: 'offer-manual' }), 409, 'conflict');
  });

  it('requires asset, access policy and contract policy, which must exist', async () => {
    for (const field of ['asset_id', 'access_policy_id', 'contract_policy_id'] as const) {
      const { [field]: _left, ...rest } = offer;
      expectError(await api.post('/api/v1/offers', rest), 400, 'invalid_request', field);
      expectError(
        await api.post('/api/v1/offers', { ...offer, [field]: 'missing' }),
        400,
        'invalid_request',
        field,
      );
    }
    expectError(
      await api.post('/api/v1/offers', { ...offer, approval: 'sometimes' }),
      400,
      'invalid_request',
      'approval',
    );
  });

  it('replaces an offer on PUT, reads it, and lists offers; a product read includes its offers', async () => {
    const res = await api.put('/api/v1/offers/offer-manual', { ...offer, approval: 'automatic' });
    expect(res.status).to.equal(200);
    expect(res.body).to.include({ id: 'offer-manual', approval: 'automatic' });
    expect((await api.get('/api/v1/offers/offer-manual')).body.approval).to.equal('automatic');
    const list = await api.get('/api/v1/offers');
    expect(list.body.items).to.have.length(2);
    const product = await api.get('/api/v1/products/prod-1');
    expect(product.body.offers.map((o: { id: string }) => o.id)).to.include('offer-manual');
  });

  it('refuses PUT for an unknown offer (not_found), a differing id, or missing fields', async () => {
    expectError(await api.put('/api/v1/offers/nope', offer), 404, 'not_found', 'nope');
    expectError(
      await api.put('/api/v1/offers/offer-manual', { ...offer, id: 'other' }),
      400,
      'invalid_request',
      'id',
    );
    expectError(
      await api.put('/api/v1/offers/offer-manual', { asset_id: 'prod-1' }),
      400,
      'invalid_request',
      'access_policy_id',
    );
    expectError(await api.get('/api/v1/offers/nope'), 404, 'not_found');
  });
});
