import { expect } from 'chai';
import http from 'node:http';
import { startTestConnector, uniqueName, type TestConnector } from '../support/stack.js';
import { recordHistory } from '../support/histories.js';
import { client } from '../support/http.js';
import { expectError } from '../support/expect-error.js';
import { outboxStore } from '../../db/outbox.js';
import { freePort } from '../../dev/processes.js';
import type { OutboxDeliveryResult } from '../../workflows/outbox-delivery.js';
import type { DeliveryRetry } from '../../domain/outbox.js';

/** A counterparty on loopback that answers with the statuses it is given, in order (then 200). */
async function peer(statuses: number[], port = 0) {
  const received: Array<{ body: unknown; headers: http.IncomingHttpHeaders }> = [];
  const server = http.createServer((req, res) => {
    let data = '';
    req.on('data', (c: Buffer) => (data += c.toString()));
    req.on('end', () => {
      received.push({ body: JSON.parse(data), headers: req.headers });
      const status = statuses.shift() ?? 200;
      res
        .writeHead(status, { 'content-type': 'application/json' })
        .end(
          JSON.stringify(
            status < 300
              ? { ok: true }
              : status === 403
                ? { '@type': 'ContractNegotiationError', code: 'inactive_member', reason: ['not a member'] }
                : { error: 'busy' },
          ),
        );
    });
  });
  await new Promise<void>((r) => server.listen(port, '127.0.0.1', () => r()));
  const address = server.address() as { port: number };
  return {
    url: `http://127.0.0.1:${address.port}/dsp/negotiations/x/events`,
    port: address.port,
    received,
    close: () => new Promise((r) => server.close(r)),
  };
}

const fast: DeliveryRetry = { initialIntervalMs: 100, maxIntervalMs: 400, maxAttempts: 5 };

describe('workflow: outbox delivery (worker on the Temporal dev server)', () => {
  let connector: TestConnector;
  before(async () => {
    connector = await startTestConnector({ name: 'outbox' });
  });
  after(() => connector?.stop());

  async function enqueue(url: string) {
    return outboxStore(connector.db).insert({
      process_id: uniqueName('negotiation'),
      kind: 'negotiation',
      message_type: 'ContractRequestMessage',
      counterparty_did: 'did:web:peer.example',
      url,
      body: { '@type': 'ContractRequestMessage', hello: 'peer' },
      evidence_id: null,
    });
  }

  async function deliver(
    outboxId: number,
    retry: DeliveryRetry = fast,
    record?: string,
  ): Promise<OutboxDeliveryResult> {
    const workflowId = `outbox/${outboxId}/${uniqueName('try')}`;
    const result = await connector.temporal.workflow.execute('outboxDelivery', {
      taskQueue: connector.taskQueue,
      workflowId,
      args: [{ outboxId, retry }],
      workflowExecutionTimeout: '60 seconds',
    });
    if (record) await recordHistory(connector, workflowId, record);
    return result;
  }

  it('delivers after retryable failures, recording every attempt', async () => {
    const p = await peer([503, 429]);
    try {
      const row = await enqueue(p.url);
      expect(row).to.include({ status: 'pending', attempts: 0 });
      const result = await deliver(row.id, fast, 'outbox-delivery-retried');
      expect(result).to.deep.equal({ delivered: true, status: 200 });
      const after = (await outboxStore(connector.db).get(row.id))!;
      expect(after).to.include({ status: 'delivered', attempts: 3, response_status: 200, last_error: null });
      expect(after.delivered_at).to.be.a('string');
      expect(p.received).to.have.length(3);
      expect(p.received[0]!.body).to.deep.equal({ '@type': 'ContractRequestMessage', hello: 'peer' });
      expect(await outboxStore(connector.db).undelivered(row.process_id)).to.deep.equal([]);
    } finally {
      await p.close();
    }
  });

  it('drops a message at once when the counterparty refuses it for good (4xx)', async () => {
    const p = await peer([400]);
    try {
      const row = await enqueue(p.url);
      const result = await deliver(row.id);
      expect(result.delivered).to.equal(false);
      expect((result as { error: string }).error).to.include('400');
      const after = (await outboxStore(connector.db).get(row.id))!;
      expect(after).to.include({ status: 'dropped', attempts: 1, response_status: 400 });
      expect(after.last_error).to.include('400');
      expect((await outboxStore(connector.db).undelivered(row.process_id)).map((r) => r.id)).to.deep.equal([
        row.id,
      ]);
    } finally {
      await p.close();
    }
  });

  it('names the code and reasons of a protocol error body when the counterparty refuses', async () => {
    const p = await peer([403]);
    try {
      const row = await enqueue(p.url);
      const result = await deliver(row.id);
      expect(result).to.deep.equal({
        delivered: false,
        error: 'message refused: the counterparty answered 403 inactive_member: not a member',
      });
      expect((await outboxStore(connector.db).get(row.id))!).to.include({
        status: 'dropped',
        attempts: 1,
        last_error: 'message refused: the counterparty answered 403 inactive_member: not a member',
      });
    } finally {
      await p.close();
    }
  });

  it('stores what a peer answers with NUL characters without failing: refusal text replaced, answer body left out', async () => {
    for (const [status, answer] of [
      [400, '{"code":"bad\\u0000code","reason":["nul \\u0000 here"]}'],
      [200, '{"providerPid":"urn:uuid:\\u0000"}'],
    ] as const) {
      const server = http.createServer((req, res) => {
        req.resume();
        req.on('end', () => res.writeHead(status, { 'content-type': 'application/json' }).end(answer));
      });
      await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
      try {
        const row = await enqueue(`http://127.0.0.1:${(server.address() as { port: number }).port}/dsp/x`);
        const result = await deliver(row.id);
        const after = (await outboxStore(connector.db).get(row.id))!;
        if (status === 400) {
          expect(result).to.deep.equal({
            delivered: false,
            error: 'message refused: the counterparty answered 400 bad\uFFFDcode: nul \uFFFD here',
          });
          expect(after).to.include({ status: 'dropped', attempts: 1 });
        } else {
          // Delivered once; the answer PostgreSQL cannot keep is not kept.
          expect(result).to.deep.equal({ delivered: true, status: 200 });
          expect(after).to.include({ status: 'delivered', attempts: 1, response_status: 200 });
        }
      } finally {
        await new Promise((r) => server.close(r));
      }
    }
  });

  it('drops a message when the retries run out, with a readable error and next_attempt_at shown', async () => {
    const port = await freePort(); // nobody listens here
    const row = await enqueue(`http://127.0.0.1:${port}/dsp/x`);
    const result = await deliver(
      row.id,
      { initialIntervalMs: 50, maxIntervalMs: 100, maxAttempts: 3 },
      'outbox-delivery-dropped',
    );
    expect(result).to.deep.equal({
      delivered: false,
      error: 'message not delivered after retries: connection refused',
    });
    const after = (await outboxStore(connector.db).get(row.id))!;
    expect(after).to.include({
      status: 'dropped',
      attempts: 3,
      response_status: null,
      last_error: 'message not delivered after retries: connection refused',
    });
    expect(Date.parse(after.next_attempt_at)).to.be.greaterThan(Date.parse(after.created_at));
  });

  it('delivers to a peer that is down and comes back, losing nothing', async () => {
    const port = await freePort();
    const row = await enqueue(`http://127.0.0.1:${port}/dsp/negotiations/x/events`);
    const running = deliver(row.id, { initialIntervalMs: 200, maxIntervalMs: 400, maxAttempts: 50 });
    // Wait until at least one attempt failed, then bring the peer up on that port.
    for (let i = 0; i < 100 && (await outboxStore(connector.db).get(row.id))!.attempts < 1; i++)
      await new Promise((r) => setTimeout(r, 50));
    const failed = (await outboxStore(connector.db).get(row.id))!;
    expect(failed.attempts).to.be.at.least(1);
    expect(failed.last_error).to.equal('connection refused');
    const p = await peer([], port);
    try {
      expect(await running).to.deep.equal({ delivered: true, status: 200 });
      expect(p.received).to.have.length(1);
      expect((await outboxStore(connector.db).get(row.id))!.status).to.equal('delivered');
    } finally {
      await p.close();
    }
  });

  it('lets an operator resend a dropped message, which is then delivered (resent_at set)', async () => {
    const port = await freePort();
    const row = await enqueue(`http://127.0.0.1:${port}/dsp/x`);
    const dropped = await deliver(row.id, { initialIntervalMs: 20, maxIntervalMs: 40, maxAttempts: 2 });
    expect(dropped.delivered).to.equal(false);
    const api = client(connector.url, connector.adminKey);
    expect((await api.get(`/api/v1/outbox/${row.id}`)).body).to.include({ status: 'dropped', attempts: 2 });
    const p = await peer([], port);
    try {
      const resent = await api.post(`/api/v1/outbox/${row.id}/resend`);
      expect(resent.status, JSON.stringify(resent.body)).to.equal(202);
      expect(resent.body).to.include({ status: 'pending' });
      expect(resent.body.resent_at).to.be.a('string');
      for (let i = 0; i < 200 && (await outboxStore(connector.db).get(row.id))!.status !== 'delivered'; i++) {
        await new Promise((r) => setTimeout(r, 25));
      }
      expect((await outboxStore(connector.db).get(row.id))!.status).to.equal('delivered');
      expect(p.received).to.have.length(1);
      expectError(await api.post(`/api/v1/outbox/${row.id}/resend`), 409, 'conflict', 'delivered');
      expectError(await api.post('/api/v1/outbox/999999/resend'), 404, 'not_found');
      expectError(await api.post('/api/v1/outbox/abc/resend'), 400, 'invalid_request', 'id');
    } finally {
      await p.close();
    }
  });
});
