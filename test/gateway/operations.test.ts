/**
 * Running the data plane: the request log (setting, pickup through LISTEN/NOTIFY, what each
 * level logs), signed answers for signed-request agreements (signature, evidence on both
 * sides, a tampered or unsigned answer refused, evidence that cannot be recorded), and several
 * instances on one database (one active, the others `standby`, takeover after a clean stop and
 * after a SIGKILL).
 *
 * The provider's instances all sit behind one front door (its PUBLIC_URL, as behind a load
 * balancer); the consumer's gateway reaches the data plane through it.
 */
import { createHash } from 'node:crypto';
import type http from 'node:http';
import { expect } from 'chai';
import { decodeProtectedHeader, flattenedVerify, importJWK, type JWK } from 'jose';
import { client, type Client } from '../support/http.js';
import { expectError } from '../support/expect-error.js';
import { startDataspace, startParticipant, type Participant } from '../support/dataspace.js';
import type { TestConnector } from '../support/stack.js';
import { startBuildingBackend, type RunningBuildingBackend } from '../../dev/building-backend/index.js';
import type { RunningAuthority } from '../../dev/authority/index.js';
import { evidenceStore } from '../../db/evidence.js';
import { ConfigError, loadConfig } from '../../config.js';
import { freePort } from '../../dev/processes.js';
import {
  POINTS,
  SODA,
  expectGatewayError,
  negotiateAgreement,
  publishBuildings,
  publishSignedOffer,
} from './fixtures.js';
import {
  CapturedLog,
  killChild,
  startChildConnector,
  startFrontDoor,
  startLoggedConnector,
  type ChildConnector,
  type FrontDoor,
  type LogLine,
} from './instances.js';

// eslint-disable-next-line @typescript-eslint/no-explicit-any -- tests read answers of every shape
type Json = any;

const LEASE_TTL = 'PT3S';
/** The spec's promise for the request log; the lease's TTL plus a renewal tick for takeover. */
const PICKUP_MS = 10_000;
const TAKEOVER_MS = 10_000;

const sha256 = (b: Uint8Array) => createHash('sha256').update(b).digest('base64url');

describe('data plane operations: request log, signed answers, standby', function () {
  this.timeout(240_000);
  let authority: RunningAuthority;
  let backend: RunningBuildingBackend;
  let door: FrontDoor;
  const log = new CapturedLog();
  let instance: TestConnector;
  let provider: Participant;
  let consumer: Participant;
  let app: Client;
  let appKey: string;
  let signedAgreement: string;
  let child: ChildConnector | undefined;
  let restarted: TestConnector | undefined;
  let instanceStopped = false;

  const providerEnv = async () => ({
    PORT: String(await freePort()),
    PUBLIC_URL: door.url,
    DID_WEB_ALLOW_HTTP: 'true',
    AUTHORITY_URL: authority.url,
    DATAPLANE_LEASE_TTL: LEASE_TTL,
  });
  const directUrl = (c: TestConnector) => `http://127.0.0.1:${c.port}`;

  async function waitConnection(alias: string): Promise<Json> {
    const deadline = Date.now() + 20_000;
    for (;;) {
      const res = await consumer.api.get(`/api/v1/connections/${alias}`);
      if (res.status === 200 && res.body.transfer_state === 'STARTED') return res.body;
      if (Date.now() > deadline) throw new Error(`connection ${alias}: ${JSON.stringify(res.body)}`);
      await new Promise((r) => setTimeout(r, 25));
    }
  }

  let seq = 0;
  const newRequestId = (what: string) => `${what}-${++seq}-${Date.now()}`;
  /** A read the data plane answers 200 (through the sample backend), or refuses (400). */
  async function read(alias: string, outcome: 'ok' | 'refused', requestId = newRequestId(outcome)) {
    const query = outcome === 'ok' ? `point_ids=${POINTS.energy}` : 'class=brick:No_Such_Class';
    const res = await app.get(`/${alias}/v1/buildings/${SODA}/points?${query}`, {
      'x-request-id': requestId,
    });
    return { res, requestId };
  }
  const lineOf = (requestId: string) => (l: LogLine) => l.dataplane?.request_id === requestId;

  before(async () => {
    ({ authority } = await startDataspace());
    // 30 ms per backend answer: a request through the data plane is always slower than 10 ms.
    backend = await startBuildingBackend({
      keys: { 'key-soda': ['soda-hall'], 'key-rice': ['rice-hall'] },
      latencyMs: 30,
    });
    door = await startFrontDoor();
    instance = await startLoggedConnector({ name: 'ops_provider', env: await providerEnv(), log });
    door.target = directUrl(instance);
    provider = {
      connector: instance,
      api: client(directUrl(instance), instance.adminKey),
      did: instance.identity.did,
      dsp: `${door.url}/dsp`,
    };
    authority.upsert({ did: provider.did, name: 'ops provider', roles: ['researcher'], active: true });
    consumer = await startParticipant('ops-consumer', authority);

    await publishBuildings(provider, backend.url, 'ops');
    const signedOffer = await publishSignedOffer(provider, 'ops');
    await negotiateAgreement(consumer, provider, 'ops-both-read', { connection_alias: 'plain' });
    signedAgreement = await negotiateAgreement(consumer, provider, signedOffer, {
      connection_alias: 'signed',
    });
    await waitConnection('plain');
    await waitConnection('signed');

    const key = await consumer.api.post('/api/v1/api-keys', { name: 'ops app', scope: 'gateway' });
    expect(key.status).to.equal(201);
    appKey = key.body.key;
    app = client(`${consumer.connector.url}/gateway`, appKey);
    for (const alias of ['plain', 'signed']) {
      const res = await consumer.api.put(`/api/v1/connections/${alias}/apps/${key.body.id}`, {
        access: 'read',
      });
      expect(res.status).to.equal(200);
    }
  });

  after(async () => {
    if (child) await killChild(child);
    await restarted?.stop();
    if (!instanceStopped) await instance?.stop();
    await consumer?.connector.stop();
    await Promise.all([door?.close(), backend?.close(), authority?.close()]);
  });

  describe('request-log setting', () => {
    it('answers the default, then what an admin sets', async () => {
      const initial = await provider.api.get('/api/v1/settings/request-log');
      expect(initial.status).to.equal(200);
      expect(initial.body).to.deep.equal({ level: 'errors', slow_ms: 1000 });

      const put = await provider.api.put('/api/v1/settings/request-log', { level: 'warnings', slow_ms: 250 });
      expect(put.status, JSON.stringify(put.body)).to.equal(200);
      expect(put.body).to.deep.equal({ level: 'warnings', slow_ms: 250 });
      expect((await provider.api.get('/api/v1/settings/request-log')).body).to.deep.equal({
        level: 'warnings',
        slow_ms: 250,
      });
    });

    it('refuses anything else with invalid_request naming the field', async () => {
      const cases: Array<[unknown, string]> = [
        [{ level: 'verbose', slow_ms: 100 }, 'level'],
        [{ slow_ms: 100 }, 'level'],
        [{ level: 'all' }, 'slow_ms'],
        [{ level: 'all', slow_ms: 9 }, 'slow_ms'],
        [{ level: 'all', slow_ms: 60_001 }, 'slow_ms'],
        [{ level: 'all', slow_ms: 12.5 }, 'slow_ms'],
        [{ level: 'all', slow_ms: '100' }, 'slow_ms'],
        [{ level: 'all', slow_ms: 100, sample: 0.5 }, 'sample'],
      ];
      for (const [body, field] of cases) {
        const res = await provider.api.put('/api/v1/settings/request-log', body);
        expectError(res, 400, 'invalid_request', new RegExp(`^${field}: `));
      }
      expectError(
        await provider.api.put('/api/v1/settings/request-log', '[1,', { 'content-type': 'application/json' }),
        400,
        'invalid_request',
      );
      // Nothing of that changed the setting.
      expect((await provider.api.get('/api/v1/settings/request-log')).body).to.deep.equal({
        level: 'warnings',
        slow_ms: 250,
      });
    });

    it('needs the admin role to change it, and a key to read it', async () => {
      const operator = await provider.api.post('/api/v1/api-keys', { name: 'ops', role: 'operator' });
      const asOperator = client(directUrl(instance), operator.body.key);
      expect((await asOperator.get('/api/v1/settings/request-log')).status).to.equal(200);
      expectError(
        await asOperator.put('/api/v1/settings/request-log', { level: 'all', slow_ms: 100 }),
        403,
        'forbidden',
      );
      expectError(
        await client(directUrl(instance)).get('/api/v1/settings/request-log'),
        401,
        'unauthenticated',
      );
    });
  });

  describe('request log', () => {
    /** Sets the level and waits for the data plane to say it is in force (the spec allows 10 s). */
    async function setRequestLog(level: string, slowMs: number) {
      const res = await provider.api.put('/api/v1/settings/request-log', { level, slow_ms: slowMs });
      expect(res.status).to.equal(200);
      await log.waitFor(
        (l) =>
          l.msg === 'request log setting in force' &&
          l.requestLog?.level === level &&
          l.requestLog?.slow_ms === slowMs &&
          log.lines.indexOf(l) >= mark,
        PICKUP_MS,
        `applying ${level}/${slowMs}`,
      );
      mark = log.lines.length;
    }
    let mark = 0;

    it('all: logs every request, refusals as warnings', async () => {
      await setRequestLog('all', 60_000);
      const ok = await read('plain', 'ok');
      expect(ok.res.status, JSON.stringify(ok.res.body)).to.equal(200);
      const line = await log.waitFor(lineOf(ok.requestId), 5_000, 'for a successful read');
      expect(line.level).to.equal(30);
      expect(line.msg).to.equal('data plane request');
      expect(line.dataplane).to.include({
        method: 'GET',
        path: `/dataplane/v1/buildings/${SODA}/points`,
        status: 200,
        building_id: SODA,
        consumer: consumer.did,
      });
      expect(line.dataplane.ms).to.be.a('number');
      expect(line.dataplane.transfer_id).to.be.a('string');
      expect(JSON.stringify(line)).not.to.match(/dpt_/, 'never the token');

      const refused = await read('plain', 'refused');
      expectGatewayError(refused.res, 400, 'invalid_request', { origin: 'dataplane', target: 'class' });
      const warning = await log.waitFor(lineOf(refused.requestId), 5_000, 'for a refused read');
      expect(warning.level).to.equal(40);
      expect(warning.dataplane).to.include({ status: 400, error_code: 'invalid_request' });
    });

    it('errors: logs refusals only', async () => {
      await setRequestLog('errors', 60_000);
      const ok = await read('plain', 'ok');
      const refused = await read('plain', 'refused');
      expect(ok.res.status).to.equal(200);
      expect(refused.res.status).to.equal(400);
      await log.waitFor(lineOf(refused.requestId), 5_000, 'for the refused read');
      // Lines are written as each request ends: the earlier request would be there by now.
      expect(log.find(lineOf(ok.requestId))).to.equal(undefined);
    });

    it('warnings: logs refusals and requests slower than slow_ms, as warnings', async () => {
      await setRequestLog('warnings', 10);
      const slow = await read('plain', 'ok');
      expect(slow.res.status).to.equal(200);
      const line = await log.waitFor(lineOf(slow.requestId), 5_000, 'for a slow read');
      expect(line.level).to.equal(40);
      expect(line.msg).to.equal('data plane request slow');
      expect(line.dataplane).to.include({ status: 200, slow: true });
      expect(line.dataplane.ms).to.be.greaterThan(10);

      await setRequestLog('warnings', 60_000);
      const quick = await read('plain', 'ok');
      const refused = await read('plain', 'refused');
      await log.waitFor(lineOf(refused.requestId), 5_000, 'for the refused read');
      expect(log.find(lineOf(quick.requestId))).to.equal(undefined);
    });

    it('off: logs nothing', async () => {
      await setRequestLog('off', 60_000);
      const ok = await read('plain', 'ok');
      const refused = await read('plain', 'refused');
      expect([ok.res.status, refused.res.status]).to.deep.equal([200, 400]);
      await setRequestLog('all', 60_000);
      const after = await read('plain', 'ok');
      await log.waitFor(lineOf(after.requestId), 5_000, 'for a read after switching back');
      expect(log.find(lineOf(ok.requestId))).to.equal(undefined);
      expect(log.find(lineOf(refused.requestId))).to.equal(undefined);
    });
  });

  describe('signed answers', () => {
    let consumerTransfer: string;
    let providerTransfer: string;
    before(async () => {
      consumerTransfer = (await consumer.api.get('/api/v1/connections/signed')).body.transfer_id;
      const transfers = await provider.api.get(`/api/v1/transfers?agreement_id=${signedAgreement}`);
      providerTransfer = transfers.body.items[0].id;
      door.tamper = false;
      door.strip = false;
    });
    afterEach(() => {
      door.tamper = false;
      door.strip = false;
    });
    const lastAnswer = () => door.answers.at(-1)!;

    it('signs the exact answer bytes with the provider DID key; the gateway checks and passes it', async () => {
      const { res, requestId } = await read('signed', 'ok');
      expect(res.status, JSON.stringify(res.body)).to.equal(200);
      expect(res.body.points.map((p: Json) => p.point_id)).to.deep.equal([POINTS.energy]);

      const answer = lastAnswer();
      const header = answer.headers['pl-evidence'];
      expect(header)
        .to.be.a('string')
        .and.match(/^[\w-]+\.\.[\w-]+$/);
      const [protectedB64, , signature] = (header as string).split('.');
      const h = decodeProtectedHeader(header as string) as Json;
      expect(h).to.include({
        alg: 'ES256',
        typ: 'pl-dataplane-answer+jws',
        b64: false,
        agr: signedAgreement,
        htm: 'GET',
        htu: `buildings/${SODA}/points?point_ids=${POINTS.energy}`,
        sts: 200,
      });
      expect(h.crit).to.deep.equal(['b64']);
      expect(h.nonce).to.match(/^[\w-]{16,}$/);
      expect(h.kid.startsWith(`${provider.did}#`)).to.equal(true);

      // Checked here independently, with the key the provider's DID document lists.
      const didDocument = (await (await fetch(`${door.url}/.well-known/did.json`)).json()) as Json;
      const method = didDocument.verificationMethod.find((m: Json) => m.id === h.kid);
      expect(didDocument.assertionMethod).to.include(h.kid);
      const key = await importJWK(method.publicKeyJwk as JWK, 'ES256');
      await flattenedVerify({ protected: protectedB64!, payload: answer.body, signature: signature! }, key);

      // Both sides recorded the request and the answer.
      const providerSide = (await evidenceStore(instance.db).forProcess(providerTransfer)).filter(
        (e) => (e.payload as Json).request_id === requestId,
      );
      expect(providerSide.map((e) => e.kind)).to.deep.equal(['dataplane.request', 'dataplane.answer']);
      expect(providerSide[0]!.payload).to.include({
        agreement_id: signedAgreement,
        consumer_did: consumer.did,
        method: 'GET',
        target: h.htu,
        nonce: h.nonce,
      });
      expect(providerSide[1]!.payload).to.include({
        status: 200,
        body_sha256: sha256(answer.body),
        signature: header,
      });
      const consumerSide = (await evidenceStore(consumer.connector.db).forProcess(consumerTransfer)).filter(
        (e) => (e.payload as Json).request_id === requestId,
      );
      expect(consumerSide.map((e) => e.kind)).to.deep.equal(['gateway.request', 'gateway.answer']);
      expect(consumerSide[0]!.payload).to.include({ alias: 'signed', agreement_id: signedAgreement });
      expect(consumerSide[1]!.payload).to.include({
        status: 200,
        body_sha256: sha256(answer.body),
        kid: h.kid,
        signature: header,
      });
    });

    it('signs refusals and current values too', async () => {
      const refused = await read('signed', 'refused');
      expectGatewayError(refused.res, 400, 'invalid_request', { origin: 'dataplane', target: 'class' });
      expect(decodeProtectedHeader(lastAnswer().headers['pl-evidence'] as string)).to.include({ sts: 400 });

      const values = await app.get(`/signed/v1/buildings/${SODA}/points/values?point_ids=${POINTS.energy}`);
      expect(values.status, JSON.stringify(values.body)).to.equal(200);
      expect(values.body.readings.length + values.body.unavailable.length).to.equal(1);
      expect(lastAnswer().headers['pl-evidence']).to.be.a('string');
    });

    it('leaves answers of agreements without signed requests unsigned and unrecorded', async () => {
      const plainTransfer = (await consumer.api.get('/api/v1/connections/plain')).body.transfer_id;
      const { res } = await read('plain', 'ok');
      expect(res.status).to.equal(200);
      expect(lastAnswer().headers).not.to.have.property('pl-evidence');
      const recorded = await evidenceStore(consumer.connector.db).forProcess(plainTransfer);
      expect(recorded.filter((e) => e.kind.startsWith('gateway.'))).to.deep.equal([]);
    });

    it('refuses a tampered answer (one byte changed on the way) with upstream_unavailable', async () => {
      door.tamper = true;
      // Without signatures the change goes through unnoticed: the answer is still a valid one.
      const plain = await read('plain', 'ok');
      expect(plain.res.status).to.equal(200);
      expect(plain.res.body.platform_version).to.equal('1.9');

      const { res, requestId } = await read('signed', 'ok');
      expectGatewayError(res, 502, 'upstream_unavailable', {
        retryable: false,
        origin: 'gateway',
        buildingId: SODA,
        message: /signature does not match/,
      });
      const refused = (await evidenceStore(consumer.connector.db).forProcess(consumerTransfer)).filter(
        (e) => (e.payload as Json).request_id === requestId,
      );
      expect(refused.map((e) => e.kind)).to.deep.equal(['gateway.request', 'gateway.answer_refused']);
    });

    it('refuses an answer without its signature with upstream_unavailable', async () => {
      door.strip = true;
      const { res } = await read('signed', 'ok');
      expectGatewayError(res, 502, 'upstream_unavailable', {
        retryable: false,
        origin: 'gateway',
        message: /no signature/,
      });
      const refusal = await read('signed', 'refused');
      expectGatewayError(refusal.res, 502, 'upstream_unavailable', { origin: 'gateway' });
    });

    /** Makes one database refuse new evidence, as a full or failing store would. */
    async function refuseEvidence(db: TestConnector['db'], during: () => Promise<void>) {
      await db.raw(`CREATE OR REPLACE FUNCTION test_refuse_evidence() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN RAISE EXCEPTION 'the evidence store refuses writes (test)'; END $$`);
      await db.raw(
        'CREATE TRIGGER test_refuse_evidence BEFORE INSERT ON evidence FOR EACH ROW EXECUTE FUNCTION test_refuse_evidence()',
      );
      try {
        await during();
      } finally {
        await db.raw('DROP TRIGGER test_refuse_evidence ON evidence');
      }
    }

    it('answers evidence_unavailable (retryable) when the provider cannot record', async () => {
      await refuseEvidence(instance.db, async () => {
        const { res } = await read('signed', 'ok');
        expectGatewayError(res, 503, 'evidence_unavailable', {
          retryable: true,
          origin: 'dataplane',
          buildingId: SODA,
        });
        // Agreements without signed requests do not need the evidence store.
        expect((await read('plain', 'ok')).res.status).to.equal(200);
      });
      expect((await read('signed', 'ok')).res.status).to.equal(200);
    });

    it('answers evidence_unavailable (retryable) when the gateway cannot record', async () => {
      await refuseEvidence(consumer.connector.db, async () => {
        const { res } = await read('signed', 'ok');
        expectGatewayError(res, 503, 'evidence_unavailable', {
          retryable: true,
          origin: 'gateway',
          buildingId: SODA,
        });
        expect((await read('plain', 'ok')).res.status).to.equal(200);
      });
      expect((await read('signed', 'ok')).res.status).to.equal(200);
    });
  });

  describe("the 16 MiB cap on a data plane's answer", () => {
    afterEach(() => {
      door.fake = undefined;
    });
    const MiB = 1024 * 1024;

    /** Streams `size` bytes of a JSON string in 1 MiB pieces, with or without Content-Length. */
    function streamAnswer(size: number, declared: boolean) {
      return (_req: http.IncomingMessage, res: http.ServerResponse) => {
        res.writeHead(200, {
          'content-type': 'application/json',
          ...(declared ? { 'content-length': String(size) } : {}),
        });
        const piece = Buffer.alloc(MiB, 'a');
        let sent = 0;
        const more = () => {
          while (sent < size) {
            const n = Math.min(MiB, size - sent);
            sent += n;
            if (!res.write(n === MiB ? piece : piece.subarray(0, n))) return void res.once('drain', more);
          }
          res.end();
        };
        res.on('error', () => undefined);
        more();
      };
    }

    for (const declared of [true, false]) {
      it(`refuses 17 MiB ${declared ? 'announced by Content-Length' : 'sent without a length'} with upstream_unavailable`, async () => {
        door.fake = streamAnswer(17 * MiB, declared);
        const { res } = await read('plain', 'ok');
        expectGatewayError(res, 502, 'upstream_unavailable', {
          retryable: false,
          origin: 'gateway',
          buildingId: SODA,
          message: /16 MiB/,
        });
      });
    }

    /** A valid JSON answer of `size` bytes (a points envelope padded with one long name). */
    function jsonOfSize(size: number): Buffer {
      const head = '{"platform_version":"1.0","building_id":"x","points":[],"padding":"';
      const tail = '"}';
      return Buffer.from(head + 'p'.repeat(size - head.length - tail.length) + tail);
    }

    it('passes a large answer on as it arrives, byte for byte, with its length', async () => {
      const body = jsonOfSize(3 * MiB);
      door.fake = (_req, res) => {
        res.writeHead(200, { 'content-type': 'application/json', 'content-length': String(body.length) });
        // In pieces, so that the gateway is forwarding while the data plane is still sending.
        for (let at = 0; at < body.length; at += 256 * 1024) res.write(body.subarray(at, at + 256 * 1024));
        res.end();
      };
      const res = await fetch(`${consumer.connector.url}/gateway/plain/v1/buildings/${SODA}/points`, {
        headers: { authorization: `Bearer ${appKey}` },
      });
      expect(res.status).to.equal(200);
      expect(res.headers.get('content-length')).to.equal(String(body.length));
      expect(res.headers.get('content-type')).to.match(/^application\/json/);
      expect(Buffer.from(await res.arrayBuffer()).equals(body)).to.equal(true);
    });

    it('cuts a streamed answer off when the data plane stops short of its declared length', async () => {
      const body = jsonOfSize(2 * MiB);
      door.fake = (_req, res) => {
        res.writeHead(200, { 'content-type': 'application/json', 'content-length': String(body.length) });
        res.write(body.subarray(0, MiB), () => res.destroy());
      };
      const res = await fetch(`${consumer.connector.url}/gateway/plain/v1/buildings/${SODA}/points`, {
        headers: { authorization: `Bearer ${appKey}` },
      });
      // The status went out before the answer broke: the application sees a broken body, never a short one.
      expect(res.status).to.equal(200);
      let failed: unknown;
      try {
        await res.arrayBuffer();
      } catch (err) {
        failed = err;
      }
      expect(failed, 'the body must not end as if complete').to.be.instanceOf(Error);
    });

    it('still serves once the peer behaves again', async () => {
      expect((await read('plain', 'ok')).res.status).to.equal(200);
    });
  });

  describe('several data plane instances', () => {
    it('refuses a lease TTL under a second', () => {
      expect(() => loadConfig({ DATAPLANE_LEASE_TTL: 'PT0.5S' })).to.throw(
        ConfigError,
        /DATAPLANE_LEASE_TTL/,
      );
      expect(() => loadConfig({ DATAPLANE_LEASE_TTL: 'P1M' })).to.throw(ConfigError, /DATAPLANE_LEASE_TTL/);
      expect(loadConfig({}).dataplaneLeaseTtlMs).to.equal(10_000);
    });

    /** Reads through the gateway until the answer is 200 or the deadline passes; returns the answers seen. */
    async function readUntilServed(alias: string, ms: number) {
      const deadline = Date.now() + ms;
      const seen: number[] = [];
      for (;;) {
        const { res } = await read(alias, 'ok');
        seen.push(res.status);
        if (res.status === 200) return seen;
        expectGatewayError(res, 503, 'standby', { retryable: true, origin: 'dataplane' });
        if (Date.now() > deadline) throw new Error(`not served within ${ms} ms: ${seen.join(',')}`);
        await new Promise((r) => setTimeout(r, 100));
      }
    }

    it('a second instance on the same database answers standby; the gateway passes that on', async () => {
      child = await startChildConnector({
        DATABASE_URL: instance.databaseUrl,
        TEMPORAL_TASK_QUEUE: instance.taskQueue,
        CONNECTOR_ROLES: 'api',
        PUBLIC_URL: door.url,
        DID_WEB_ALLOW_HTTP: 'true',
        AUTHORITY_URL: authority.url,
        DATAPLANE_LEASE_TTL: LEASE_TTL,
      });
      const direct = await client(child.directUrl).get(`/dataplane/v1/buildings/${SODA}/points`);
      expectGatewayError(direct, 503, 'standby', { retryable: true, buildingId: SODA, origin: 'dataplane' });
      expect(direct.body.error.retry_after).to.match(/^PT\dS$/);

      // The first instance still serves.
      expect((await read('plain', 'ok')).res.status).to.equal(200);

      door.target = child.directUrl;
      for (const alias of ['plain', 'signed']) {
        const { res } = await read(alias, 'ok');
        expectGatewayError(res, 503, 'standby', { retryable: true, buildingId: SODA, origin: 'dataplane' });
      }
    });

    it('takes over within seconds when the active instance stops', async () => {
      await instance.stop();
      instanceStopped = true;
      const seen = await readUntilServed('plain', TAKEOVER_MS);
      expect(seen.at(-1)).to.equal(200);
      expect((await read('signed', 'ok')).res.status).to.equal(200);
    });

    it('takes over once the lease runs out when the active instance is killed', async () => {
      restarted = await startLoggedConnector({
        name: 'ops_provider',
        env: await providerEnv(),
        log,
        restartOf: instance,
      });
      const standby = await client(directUrl(restarted)).get(`/dataplane/v1/buildings/${SODA}/points`);
      expectGatewayError(standby, 503, 'standby', { retryable: true });

      const killedAt = log.lines.length;
      await killChild(child!);
      door.target = directUrl(restarted);
      const seen = await readUntilServed('plain', TAKEOVER_MS);
      expect(seen.at(-1)).to.equal(200);
      await log.waitFor(
        (l) => l.msg === 'data plane: this instance is active' && log.lines.indexOf(l) >= killedAt,
        1_000,
        'of the takeover',
      );
      expect((await read('signed', 'ok')).res.status).to.equal(200);
    });
  });
});
