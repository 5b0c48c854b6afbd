import { expect } from 'chai';
import { startTestConnector, type TestConnector } from './support/stack.js';
import { client } from './support/http.js';

describe('connector process', () => {
  let connector: TestConnector;
  before(async () => {
    connector = await startTestConnector({ name: 'foundation' });
  });
  after(() => connector?.stop());

  it('answers /healthz and /readyz with every check ok', async () => {
    const http = client(connector.url);
    const health = await http.get('/healthz');
    expect(health.status).to.equal(200);
    expect(health.body).to.deep.equal({ status: 'ok' });
    const ready = await http.get('/readyz');
    expect(ready.status).to.equal(200);
    expect(ready.body).to.deep.equal({
      status: 'ready',
      checks: { database: 'ok', temporal: 'ok', worker: 'ok' },
    });
  });
});
