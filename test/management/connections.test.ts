/**
 * Connections on the consumer side, with two connectors over loopback: a negotiation with a
 * connection alias names the connection at once and starts its transfer when FINALIZED; the
 * gateway's lookups (db/connections.ts) see the running transfer; operators list, read and delete
 * connections and say which applications may use them.
 */
import { expect } from 'chai';
import { expectError } from '../support/expect-error.js';
import {
  publishOffer,
  startDataspace,
  startParticipant,
  waitFor,
  type Participant,
} from '../support/dataspace.js';
import type { RunningAuthority } from '../../dev/authority/index.js';
import type { RunningBuildingBackend } from '../../dev/building-backend/index.js';
import { findConnectionApp, findGatewayRoute } from '../../db/connections.js';
import { endpointProperty, verifyTransferToken } from '../../gateway/dataplane/access.js';
import { MASK } from '../../domain/masking.js';
import { transferAckQuery } from '../../workflows/transfer-messages.js';
import { decryptPayloads } from '../support/histories.js';

// eslint-disable-next-line @typescript-eslint/no-explicit-any -- tests read answers of every shape
type Json = any;

describe('connections (consumer side)', function () {
  this.timeout(120_000);
  let authority: RunningAuthority;
  let backend: RunningBuildingBackend;
  let provider: Participant;
  let consumer: Participant;

  before(async () => {
    ({ authority, backend } = await startDataspace());
    provider = await startParticipant('provider', authority);
    consumer = await startParticipant('consumer', authority);
    await publishOffer(provider, backend, 'automatic', 'conn-offer');
  });
  after(async () => {
    await consumer?.connector.stop();
    await provider?.connector.stop();
    await backend?.close();
    await authority?.close();
  });

  const negotiate = (alias: string) =>
    consumer.api.post('/api/v1/negotiations', {
      counterparty_address: provider.dsp,
      counterparty_did: provider.did,
      offer_id: 'conn-offer',
      dataset_id: 'product-conn-offer',
      connection_alias: alias,
    });

  /** Polls a connection until `done` holds. */
  async function waitConnection(alias: string, done: (c: Json) => boolean): Promise<Json> {
    const deadline = Date.now() + 20_000;
    for (;;) {
      const res = await consumer.api.get(`/api/v1/connections/${alias}`);
      if (res.status === 200 && done(res.body)) return res.body;
      if (Date.now() > deadline)
        throw new Error(`connection ${alias} did not get there: ${JSON.stringify(res.body)}`);
      await new Promise((r) => setTimeout(r, 25));
    }
  }

  let agreementId: string;
  let transferId: string;

  it('names the connection when the negotiation starts and starts its transfer when FINALIZED', async () => {
    const started = await negotiate('soda-live');
    expect(started.status, JSON.stringify(started.body)).to.equal(201);
    // Known at once, not active yet: the gateway can say so.
    const early = await consumer.api.get('/api/v1/connections/soda-live');
    expect(early.status).to.equal(200);
    expect(early.body).to.include({
      alias: 'soda-live',
      negotiation_id: started.body.id,
      provider_did: provider.did,
    });
    expect(await findGatewayRoute(consumer.connector.db, 'soda-live')).to.include({ alias: 'soda-live' });

    const done = await waitFor(consumer.api, started.body.id, (n) => n.state === 'FINALIZED');
    agreementId = done.agreement_id;
    const live = await waitConnection('soda-live', (c) => c.transfer_state === 'STARTED');
    expect(live).to.include({ agreement_id: agreementId, negotiation_id: started.body.id });
    expect(live.apps).to.deep.equal([]);
    transferId = live.transfer_id;

    const transfer = await consumer.api.get(`/api/v1/transfers/${encodeURIComponent(transferId)}`);
    expect(transfer.body).to.include({
      role: 'consumer',
      connection_alias: 'soda-live',
      agreement_id: agreementId,
      format: 'HttpData-PULL',
    });
    // The gateway reads the whole address; operators see it masked.
    const deadline = Date.now() + 10_000;
    let route = await findGatewayRoute(consumer.connector.db, 'soda-live');
    while (!route?.dataAddress && Date.now() < deadline) {
      await new Promise((r) => setTimeout(r, 25));
      route = await findGatewayRoute(consumer.connector.db, 'soda-live');
    }
    expect(route).to.include({ alias: 'soda-live', agreementId, transferId, providerDid: provider.did });
    expect(route!.transferState).to.equal('STARTED');
    const token = endpointProperty(route!.dataAddress!, 'authorization')!;
    expect(token).to.match(/^dpt_/);
    expect(await verifyTransferToken(provider.connector.db, token)).to.include({ agreementId });
    expect(endpointProperty(transfer.body.data_address, 'authorization')).to.equal(MASK);

    const list = await consumer.api.get('/api/v1/connections');
    expect(list.status).to.equal(200);
    expect(list.body.items.map((c: { alias: string }) => c.alias)).to.include('soda-live');
    expect(list.body.items.find((c: { alias: string }) => c.alias === 'soda-live').transfer_state).to.equal(
      'STARTED',
    );
    expect(list.body.next_cursor).to.equal(null);
    expect(await findGatewayRoute(consumer.connector.db, 'unknown')).to.equal(null);
    expectError(await consumer.api.get('/api/v1/connections/unknown'), 404, 'not_found');
    expectError(await consumer.api.get('/api/v1/connections/Not_An_Alias'), 400, 'invalid_request', 'alias');
  });

  /** Every payload in a workflow history, but its search attributes (the server's to read: never encrypted). */
  function payloadsOf(history: unknown): Array<{ metadata: Record<string, Uint8Array>; data: Uint8Array }> {
    const found: Array<{ metadata: Record<string, Uint8Array>; data: Uint8Array }> = [];
    const collect = (node: unknown): void => {
      if (node === null || typeof node !== 'object' || ArrayBuffer.isView(node)) return;
      const p = node as { metadata?: Record<string, Uint8Array>; data?: Uint8Array };
      if (p.metadata && p.data) found.push(p as (typeof found)[number]);
      else for (const [key, value] of Object.entries(node)) if (key !== 'searchAttributes') collect(value);
    };
    collect(history);
    return found;
  }

  it("keeps the pull token out of Temporal's histories: every payload of both transfers is encrypted", async () => {
    const route = await findGatewayRoute(consumer.connector.db, 'soda-live');
    const token = endpointProperty(route!.dataAddress!, 'authorization')!;
    const sides = [
      {
        connector: consumer.connector,
        row: await consumer.connector.db('transfers').where({ id: transferId }).first('workflow_id'),
      },
      {
        connector: provider.connector,
        row: await provider.connector
          .db('transfers')
          .where({ agreement_id: agreementId })
          .first('workflow_id'),
      },
    ];
    for (const { connector, row } of sides) {
      expect(row, 'transfer row').to.not.equal(undefined);
      const history = await connector.temporal.workflow.getHandle(row.workflow_id).fetchHistory();
      const payloads = payloadsOf(history);
      // Update arguments, activity inputs and results: the start message with the token among them.
      expect(payloads.length, row.workflow_id).to.be.at.least(5);
      for (const p of payloads) {
        expect(Buffer.from(p.metadata.encoding!).toString(), row.workflow_id).to.equal('binary/encrypted');
        expect(Buffer.from(p.data).includes(token), row.workflow_id).to.equal(false);
      }
      // With the connector's key the same history holds the token: it did pass through Temporal.
      await decryptPayloads(history, connector);
      expect(
        payloadsOf(history).some((p) => Buffer.from(p.data).includes(token)),
        row.workflow_id,
      ).to.equal(true);
      // The connector itself still talks to its workflow: a query's answer decrypts with its key.
      const ack = await connector.temporal.workflow.getHandle(row.workflow_id).query(transferAckQuery);
      expect(ack).to.include({ state: 'STARTED', consumerPid: transferId });
    }
  });

  it('says which applications may use a connection, read-only or read-write', async () => {
    const app = await consumer.api.post('/api/v1/api-keys', { name: 'dashboard', scope: 'gateway' });
    expect(app.status, JSON.stringify(app.body)).to.equal(201);
    const keys = (await consumer.api.get('/api/v1/api-keys')).body.items as Array<{
      id: string;
      scope: string;
    }>;
    const management = keys.find((k) => k.scope === 'management')!;
    const path = (id: string) => `/api/v1/connections/soda-live/apps/${id}`;

    expectError(
      await consumer.api.put(path(management.id), { access: 'read' }),
      400,
      'invalid_request',
      'gateway',
    );
    expectError(await consumer.api.put(path('nope'), { access: 'read' }), 404, 'not_found');
    expectError(
      await consumer.api.put(path(app.body.id), { access: 'write' }),
      400,
      'invalid_request',
      'access',
    );
    expectError(
      await consumer.api.put(`/api/v1/connections/other/apps/${app.body.id}`, { access: 'read' }),
      404,
      'not_found',
    );

    const read = await consumer.api.put(path(app.body.id), { access: 'read' });
    expect(read.status, JSON.stringify(read.body)).to.equal(200);
    expect(read.body.apps).to.have.length(1);
    expect(read.body.apps[0]).to.include({ api_key_id: app.body.id, access: 'read' });
    expect(await findConnectionApp(consumer.connector.db, 'soda-live', app.body.id)).to.deep.equal({
      access: 'read',
    });
    const write = await consumer.api.put(path(app.body.id), { access: 'read_write' });
    expect(write.body.apps[0]).to.include({ access: 'read_write' });
    expect(await findConnectionApp(consumer.connector.db, 'soda-live', app.body.id)).to.deep.equal({
      access: 'read_write',
    });
    expect(await findConnectionApp(consumer.connector.db, 'soda-live', management.id)).to.equal(null);

    const removed = await consumer.api.delete(path(app.body.id));
    expect(removed.status).to.equal(200);
    expect(removed.body.apps).to.deep.equal([]);
    expect(await findConnectionApp(consumer.connector.db, 'soda-live', app.body.id)).to.equal(null);
    expectError(await consumer.api.delete(path(app.body.id)), 404, 'not_found');
  });

  it('points a connection at a transfer started by hand with an alias', async () => {
    const started = await consumer.api.post('/api/v1/transfers', {
      agreement_id: agreementId,
      connection_alias: 'by-hand',
    });
    expect(started.status, JSON.stringify(started.body)).to.equal(201);
    const c = await waitConnection('by-hand', (x) => x.transfer_state === 'STARTED');
    expect(c).to.include({ transfer_id: started.body.id, agreement_id: agreementId, negotiation_id: null });
    expectError(
      await consumer.api.post('/api/v1/transfers', {
        agreement_id: agreementId,
        connection_alias: 'Bad Alias',
      }),
      400,
      'invalid_request',
      'connection_alias',
    );
  });

  it('deletes a connection: its running transfer is terminated on both sides', async () => {
    const deleted = await consumer.api.delete('/api/v1/connections/soda-live');
    expect(deleted.status, JSON.stringify(deleted.body)).to.equal(200);
    expect(deleted.body).to.include({
      alias: 'soda-live',
      transfer_id: transferId,
      transfer_state: 'TERMINATED',
    });
    expectError(await consumer.api.get('/api/v1/connections/soda-live'), 404, 'not_found');
    expect(await findGatewayRoute(consumer.connector.db, 'soda-live')).to.equal(null);
    const deadline = Date.now() + 15_000;
    for (;;) {
      const list = await provider.api.get('/api/v1/transfers?role=provider&state=TERMINATED');
      const theirs = list.body.items.find((t: { consumer_pid: string }) => t.consumer_pid === transferId);
      if (theirs) {
        expect(theirs.error).to.include('the connection was deleted');
        break;
      }
      if (Date.now() > deadline) throw new Error('the provider never ended the transfer');
      await new Promise((r) => setTimeout(r, 25));
    }
    expectError(await consumer.api.delete('/api/v1/connections/soda-live'), 404, 'not_found');
  });

  it('moves a connection to the newest negotiation that names it; the transfer it served ends on both sides', async () => {
    const first = await negotiate('renamed');
    const old = await waitConnection('renamed', (c) => c.transfer_state === 'STARTED');
    const second = await negotiate('renamed');
    const named = await waitConnection('renamed', (c) => c.negotiation_id === second.body.id);
    expect(named.negotiation_id).not.to.equal(first.body.id);
    const done = await waitFor(consumer.api, second.body.id, (n) => n.state === 'FINALIZED');
    const moved = await waitConnection('renamed', (c) => c.agreement_id === done.agreement_id);
    expect(moved.transfer_state).to.be.oneOf(['REQUESTED', 'STARTED']);
    expect(moved.transfer_id).not.to.equal(old.transfer_id);
    // The old transfer would otherwise run, and renew its token, for nobody.
    const deadline = Date.now() + 15_000;
    for (;;) {
      const ours = await consumer.api.get(
        `/api/v1/transfers/${encodeURIComponent(old.transfer_id as string)}`,
      );
      const list = await provider.api.get('/api/v1/transfers?role=provider&state=TERMINATED');
      const theirs = list.body.items.find(
        (t: { consumer_pid: string }) => t.consumer_pid === old.transfer_id,
      );
      if (ours.body.state === 'TERMINATED' && theirs) {
        expect(ours.body.error).to.equal(
          `connection 'renamed' is served by transfer ${moved.transfer_id as string} now`,
        );
        expect(theirs.error).to.include('superseded');
        break;
      }
      if (Date.now() > deadline)
        throw new Error(
          `the old transfer did not end: ${JSON.stringify(ours.body)} / ${JSON.stringify(theirs)}`,
        );
      await new Promise((r) => setTimeout(r, 25));
    }
  });
});
