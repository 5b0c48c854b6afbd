/**
 * Identity between connectors: keys and DID documents, self-issued connector tokens checked by a
 * peer, membership at the authority stand-in. Everything over real HTTP on loopback: two
 * connectors, the authority, a probe app mounting the middleware, and a "rogue" server that
 * hosts DID documents of test identities (good, oversized, slow, wrong, moving).
 */
import http from 'node:http';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { expect } from 'chai';
import Koa from 'koa';
import {
  SignJWT,
  UnsecuredJWT,
  calculateJwkThumbprint,
  compactDecrypt,
  decodeJwt,
  decodeProtectedHeader,
  exportJWK,
  generateKeyPair,
  type CryptoKey,
  type JWK,
  type JWTPayload,
} from 'jose';
import { pino } from 'pino';
import {
  TEST_KEY_ENCRYPTION_KEY,
  createTestDatabase,
  requireStack,
  startTestConnector,
  type TestConnector,
} from './support/stack.js';
import { client } from './support/http.js';
import { loadConfig, ConfigError } from '../config.js';
import { startConnector, type RunningConnector } from '../main.js';
import { createDb, migrateLatest } from '../db/knex.js';
import { seenJtiStore } from '../db/seen-jtis.js';
import { freePort } from '../dev/processes.js';
import { startAuthority, type RunningAuthority } from '../dev/authority/index.js';
import { authorityClient, noAuthority } from '../auth/authority.js';
import {
  buildDidDocument,
  didDocumentUrl,
  didWebFromUrl,
  parseDidWeb,
  type DidDocument,
} from '../auth/did.js';
import { didWebResolver, guardedLookup } from '../auth/did-web-resolver.js';
import { connectorTokenVerifier } from '../auth/connector-tokens.js';
import { KeyEncryptionError, loadKeyEncryptionKey, loadOrCreateConnectorKeys } from '../auth/keys.js';
import {
  ProtocolAuthError,
  requireConnector,
  type RequireConnectorOptions,
} from '../api/middleware/connector-auth.js';

const KEK = new Uint8Array(Buffer.from(TEST_KEY_ENCRYPTION_KEY, 'base64'));
const now = () => Math.floor(Date.now() / 1000);

/** Something that can sign as a DID: a connector's stored key, or a test identity's. */
interface Signer {
  did: string;
  kid: string;
  key: CryptoKey;
}

function sign(signer: Signer, claims: JWTPayload, header: Record<string, unknown> = {}): Promise<string> {
  return new SignJWT({ iss: signer.did, sub: signer.did, jti: crypto.randomUUID(), ...claims })
    .setProtectedHeader({ alg: 'ES256', kid: `${signer.did}#${signer.kid}`, ...header })
    .setIssuedAt(typeof claims.iat === 'number' ? claims.iat : now())
    .setExpirationTime(typeof claims.exp === 'number' ? claims.exp : now() + 300)
    .sign(signer.key);
}

async function listen(
  handler: http.RequestListener,
): Promise<{ url: string; port: number; close(): Promise<void> }> {
  const server = http.createServer(handler);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', () => resolve()));
  const { port } = server.address() as { port: number };
  return {
    url: `http://127.0.0.1:${port}`,
    port,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}

/** A Koa app with one route behind `requireConnector`, rendering refusals as `{reason, message}`. */
async function probeApp(auth: RequireConnectorOptions) {
  const app = new Koa();
  app.silent = true;
  app.use(async function renderRefusals(ctx, next) {
    try {
      await next();
    } catch (err) {
      if (!(err instanceof ProtocolAuthError)) throw err;
      ctx.status = err.status;
      ctx.body = { reason: err.reason, message: err.message };
    }
  });
  app.use(requireConnector(auth));
  app.use(function probe(ctx) {
    ctx.body = ctx.state.peer;
  });
  return listen(app.callback());
}

/** Test identities whose DID documents a loopback server hosts under `/<name>/did.json`. */
async function rogueDidHost() {
  const routes = new Map<string, (res: http.ServerResponse) => void>();
  const server = await listen((req, res) => {
    const route = routes.get(req.url ?? '');
    if (route) route(res);
    else res.writeHead(404).end();
  });
  const didFor = (name: string) => `did:web:127.0.0.1%3A${server.port}:${name}`;
  const json = (body: unknown) => (res: http.ServerResponse) =>
    res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(body));
  return {
    server,
    didFor,
    /** A DID whose document lists one fresh ES256 key; `document` may change what is served. */
    async identity(name: string, document?: (doc: DidDocument) => unknown): Promise<Signer & { jwk: JWK }> {
      const did = didFor(name);
      const { publicKey, privateKey } = await generateKeyPair('ES256');
      const jwk = await exportJWK(publicKey);
      const kid = await calculateJwkThumbprint(jwk);
      const doc = buildDidDocument(did, [{ kid, publicJwk: jwk }]);
      routes.set(`/${name}/did.json`, json(document ? document(doc) : doc));
      return { did, kid, key: privateKey, jwk };
    },
    serve(name: string, handler: (res: http.ServerResponse) => void) {
      routes.set(`/${name}/did.json`, handler);
    },
    json,
  };
}

describe('identity between connectors', function () {
  let authority: RunningAuthority;
  let a: TestConnector;
  let b: TestConnector;
  let aSigner: Signer;
  let probe: Awaited<ReturnType<typeof probeApp>>;
  let rogue: Awaited<ReturnType<typeof rogueDidHost>>;
  const closers: Array<() => Promise<void>> = [];

  const connectorEnv = () => ({
    PUBLIC_URL: 'http://127.0.0.1:0',
    DID_WEB_ALLOW_HTTP: 'true',
    AUTHORITY_URL: authority.url,
  });
  const admin = () => client(authority.url, authority.adminToken);
  /** Calls B's probe route with `Authorization: Bearer <token>` (or the header given). */
  const callB = (token: string, authorization = `Bearer ${token}`) =>
    client(probe.url).get('/', { authorization });
  const expectRefused = (
    answer: { status: number; body: { reason?: string } },
    status: number,
    reason: string,
  ) => {
    expect(answer.status, JSON.stringify(answer.body)).to.equal(status);
    expect(answer.body.reason).to.equal(reason);
  };

  before(async () => {
    authority = await startAuthority();
    [a, b] = await Promise.all([
      startTestConnector({ name: 'identity_a', env: connectorEnv() }),
      startTestConnector({ name: 'identity_b', env: connectorEnv() }),
    ]);
    for (const [c, name] of [
      [a, 'Connector A'],
      [b, 'Connector B'],
    ] as const) {
      const put = await admin().put(`/admin/v1/members/${encodeURIComponent(c.identity.did)}`, {
        name,
        roles: ['provider', 'consumer'],
        active: true,
      });
      expect(put.status).to.equal(201);
    }
    const [key] = await loadOrCreateConnectorKeys(a.db, KEK);
    aSigner = { did: a.identity.did, kid: key!.kid, key: key!.privateKey };
    probe = await probeApp({
      ourDid: b.identity.did,
      verify: b.verifyConnectorToken,
      authority: b.authority,
    });
    rogue = await rogueDidHost();
  });
  after(async () => {
    for (const close of closers) await close();
    await Promise.all([probe?.close(), rogue?.server.close(), a?.stop(), b?.stop(), authority?.close()]);
  });

  describe('keys and DID documents', () => {
    it('serves a DID document derived from PUBLIC_URL, with the real port, at /.well-known/did.json', async () => {
      expect(a.identity.did).to.equal(`did:web:127.0.0.1%3A${a.port}`);
      const answer = await client(a.url).get('/.well-known/did.json');
      expect(answer.status).to.equal(200);
      expect(answer.headers.get('content-type')).to.match(/^application\/did\+json/);
      const doc = answer.body as DidDocument;
      expect(doc).to.deep.equal(a.identity.didDocument);
      expect(doc['@context']).to.include('https://www.w3.org/ns/did/v1');
      expect(doc.id).to.equal(a.identity.did);
      expect(doc.verificationMethod).to.have.length(1);
      const method = doc.verificationMethod![0]!;
      expect(method).to.include({ type: 'JsonWebKey2020', controller: a.identity.did });
      expect(method.id).to.match(new RegExp(`^${a.identity.did}#[\\w-]{43}$`));
      expect(method.publicKeyJwk).to.include({ kty: 'EC', crv: 'P-256', alg: 'ES256' });
      expect(method.publicKeyJwk).not.to.have.property('d');
      for (const relationship of ['authentication', 'assertionMethod', 'capabilityInvocation'] as const) {
        expect(doc[relationship]).to.deep.equal([method.id]);
      }
    });

    it('resolves a peer DID over loopback http only with DID_WEB_ALLOW_HTTP', async () => {
      expect(await didWebResolver({ allowHttpLoopback: true }).resolve(a.identity.did)).to.deep.equal(
        a.identity.didDocument,
      );
      const refused = await didWebResolver({ allowHttpLoopback: false })
        .resolve(a.identity.did)
        .catch((err: unknown) => err);
      expect(refused).to.have.property('reason', 'did_not_allowed');
    });

    it('maps did:web to URLs as the did:web method says', () => {
      expect(didWebFromUrl('https://conn.example.com')).to.equal('did:web:conn.example.com');
      expect(didWebFromUrl('https://Conn.Example.com:8443/tenants/alpha/')).to.equal(
        'did:web:conn.example.com%3A8443:tenants:alpha',
      );
      expect(didDocumentUrl('did:web:example.com', 'https')).to.equal(
        'https://example.com/.well-known/did.json',
      );
      expect(didDocumentUrl('did:web:example.com%3A3000:user:alice', 'https')).to.equal(
        'https://example.com:3000/user/alice/did.json',
      );
      for (const bad of [
        'did:web:',
        'did:web:exa mple.com',
        'did:web:example.com:..',
        'did:web:a%2Fb',
        'did:web:x::y',
      ]) {
        expect(() => parseDidWeb(bad), bad).to.throw();
      }
      expect(() => parseDidWeb('did:key:z6Mk')).to.throw(/only did:web/);
    });

    it('keeps keys across a restart, serves a path-based DID at <path>/did.json, and stores no plaintext private key', async () => {
      const { temporal, workflowBundle } = requireStack();
      const databaseUrl = await createTestDatabase('identity_restart');
      const port = await freePort();
      const did = `did:web:127.0.0.1%3A${port}:tenants:r`;
      const start = () =>
        startConnector(
          loadConfig({
            PORT: String(port),
            PUBLIC_URL: `http://127.0.0.1:${port}`,
            CONNECTOR_DID: did,
            KEY_ENCRYPTION_KEY: TEST_KEY_ENCRYPTION_KEY,
            TEMPORAL_TASK_QUEUE: `tq_identity_restart_${port}`,
            CONNECTOR_ROLES: 'api',
            LOG_LEVEL: 'silent',
            DEMO_BACKEND: '0',
          }),
          {
            databaseUrl,
            temporalAddress: temporal.address,
            workflowBundle,
            logger: pino({ level: 'silent' }),
          },
        );
      let r: RunningConnector = await start();
      try {
        expect(r.identity.did).to.equal(did);
        const first = await client(r.url).get('/tenants/r/did.json');
        expect(first.status).to.equal(200);
        expect(first.body.id).to.equal(did);
        expect((await client(r.url).get('/.well-known/did.json')).body).to.deep.equal(first.body);
        await r.stop();
        r = await start();
        expect((await client(r.url).get('/tenants/r/did.json')).body).to.deep.equal(first.body);

        const rows = (await r.db('connector_keys').select('*')) as Array<{
          kid: string;
          public_jwk: JWK;
          private_key_encrypted: string;
        }>;
        expect(rows).to.have.length(1);
        const row = rows[0]!;
        expect(row.public_jwk).not.to.have.property('d');
        expect(row.private_key_encrypted.split('.')).to.have.length(5, 'a compact JWE');
        const { plaintext, protectedHeader } = await compactDecrypt(row.private_key_encrypted, KEK);
        expect(protectedHeader).to.include({ alg: 'dir', enc: 'A256GCM', kid: row.kid });
        const privateJwk = JSON.parse(new TextDecoder().decode(plaintext)) as JWK;
        expect(privateJwk.d).to.be.a('string').with.length.above(20);
        expect(row.private_key_encrypted).not.to.include(privateJwk.d);
        const stored = JSON.stringify(await r.db('connector_keys').select('*'));
        expect(stored).not.to.include(privateJwk.d);

        const otherKek = new Uint8Array(32).fill(7);
        const wrong = await loadOrCreateConnectorKeys(r.db, otherKek).catch((err: unknown) => err);
        expect(wrong).to.be.instanceOf(KeyEncryptionError);
        expect((wrong as Error).message).to.match(/key-encryption key/);
      } finally {
        await r.stop();
      }
    });

    it('makes exactly one key when several processes start together on a fresh database', async () => {
      const db = createDb(await createTestDatabase('identity_race'));
      try {
        await migrateLatest(db);
        const results = await Promise.all([1, 2, 3].map(() => loadOrCreateConnectorKeys(db, KEK)));
        const kids = new Set(results.flatMap((keys) => keys.map((k) => k.kid)));
        expect(kids.size).to.equal(1);
        expect(await db('connector_keys').count({ n: '*' })).to.deep.equal([{ n: 1 }]);
      } finally {
        await db.destroy();
      }
    });

    it('without KEY_ENCRYPTION_KEY creates DATA_DIR/keys/kek once, mode 0600, and reuses it', () => {
      const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'identity-kek-'));
      try {
        const first = loadKeyEncryptionKey({ configured: null, dataDir });
        expect(first.source).to.equal('created key file');
        const file = path.join(dataDir, 'keys', 'kek');
        expect(fs.statSync(file).mode & 0o777).to.equal(0o600);
        const again = loadKeyEncryptionKey({ configured: null, dataDir });
        expect(again.source).to.equal('key file');
        expect(Buffer.from(again.kek).equals(Buffer.from(first.kek))).to.equal(true);
        const configured = loadKeyEncryptionKey({ configured: TEST_KEY_ENCRYPTION_KEY, dataDir });
        expect(configured.source).to.equal('environment');
      } finally {
        fs.rmSync(dataDir, { recursive: true, force: true });
      }
    });

    it('refuses bad identity configuration naming the variable', () => {
      expect(() => loadConfig({ KEY_ENCRYPTION_KEY: 'c2hvcnQ=' })).to.throw(
        ConfigError,
        /KEY_ENCRYPTION_KEY/,
      );
      expect(() => loadConfig({ CONNECTOR_DID: 'did:key:z6Mk' })).to.throw(ConfigError, /CONNECTOR_DID/);
      expect(() => loadConfig({ AUTHORITY_URL: 'ftp://x' })).to.throw(ConfigError, /AUTHORITY_URL/);
      expect(() => loadConfig({ DID_WEB_ALLOW_HTTP: 'maybe' })).to.throw(ConfigError, /DID_WEB_ALLOW_HTTP/);
      const config = loadConfig({});
      expect(config.identity).to.deep.equal({ did: null, keyEncryptionKey: null, didWebAllowHttp: false });
      expect(config.authorityUrl).to.equal(null);
    });
  });

  describe('connector tokens', () => {
    it('issues a short-lived token naming us and the audience, with a kid from our DID document', async () => {
      const token = await a.identity.issueToken(b.identity.did);
      const header = decodeProtectedHeader(token);
      expect(header).to.include({ alg: 'ES256', kid: a.identity.didDocument.verificationMethod![0]!.id });
      const claims = decodeJwt(token);
      expect(claims).to.include({ iss: a.identity.did, sub: a.identity.did, aud: b.identity.did });
      expect(claims.jti).to.be.a('string').with.length.above(15);
      expect(claims.exp! - claims.iat!).to.be.closeTo(300, 1);
      expect(Math.abs(claims.iat! - now())).to.be.below(5);
    });

    it('a token from A verifies at B, and B knows A by its registry name', async () => {
      const answer = await callB(await a.identity.issueToken(b.identity.did));
      expect(answer.status, JSON.stringify(answer.body)).to.equal(200);
      expect(answer.body).to.deep.equal({
        did: a.identity.did,
        name: 'Connector A',
        roles: ['provider', 'consumer'],
      });
      // And the other way round, through A's own verifier.
      const back = await a.verifyConnectorToken(await b.identity.issueToken(a.identity.did), {
        ourDid: a.identity.did,
      });
      expect(back).to.deep.equal({ did: b.identity.did });
    });

    it('refuses a call without a bearer token (401 missing_token)', async () => {
      expectRefused(await client(probe.url).get('/'), 401, 'missing_token');
      expectRefused(await callB('', 'Basic YTpi'), 401, 'missing_token');
      expectRefused(await callB('not-a-jwt'), 401, 'malformed_token');
    });

    it('refuses a token for another audience', async () => {
      expectRefused(await callB(await a.identity.issueToken(a.identity.did)), 401, 'wrong_audience');
      expectRefused(
        await callB(await sign(aSigner, { aud: ['did:web:elsewhere.example'] })),
        401,
        'wrong_audience',
      );
      expectRefused(await callB(await sign(aSigner, {})), 401, 'missing_claim');
    });

    it('refuses expired, future, over-long and undated tokens', async () => {
      const aud = b.identity.did;
      expectRefused(
        await callB(await sign(aSigner, { aud, iat: now() - 400, exp: now() - 60 })),
        401,
        'expired',
      );
      expectRefused(
        await callB(await sign(aSigner, { aud, iat: now() + 120, exp: now() + 300 })),
        401,
        'bad_issued_at',
      );
      expectRefused(await callB(await sign(aSigner, { aud, exp: now() + 3600 })), 401, 'lifetime_too_long');
      const noExp = await new SignJWT({ iss: aSigner.did, sub: aSigner.did, aud, jti: 'x1' })
        .setProtectedHeader({ alg: 'ES256', kid: `${aSigner.did}#${aSigner.kid}` })
        .setIssuedAt()
        .sign(aSigner.key);
      expectRefused(await callB(noExp), 401, 'missing_claim');
    });

    it('refuses a replayed token (jti), keeping the id until the token expires', async () => {
      const token = await a.identity.issueToken(b.identity.did);
      expect((await callB(token)).status).to.equal(200);
      expectRefused(await callB(token), 401, 'replayed');
      const { jti, exp } = decodeJwt(token);
      const row = await b.db('seen_jtis').where({ iss: a.identity.did, jti }).first();
      expect(row).to.not.equal(undefined);
      expect(Math.round((row.exp as Date).getTime() / 1000)).to.equal(exp! + 5);
      // A token without a jti is refused before anything is stored.
      const noJti = await new SignJWT({ iss: aSigner.did, sub: aSigner.did, aud: b.identity.did })
        .setProtectedHeader({ alg: 'ES256', kid: `${aSigner.did}#${aSigner.kid}` })
        .setIssuedAt()
        .setExpirationTime('2m')
        .sign(aSigner.key);
      expectRefused(await callB(noJti), 401, 'missing_claim');
    });

    it('lets exactly one of three concurrent uses of a token through', async () => {
      const token = await a.identity.issueToken(b.identity.did);
      const answers = await Promise.all([callB(token), callB(token), callB(token)]);
      expect(answers.map((x) => x.status).sort()).to.deep.equal([200, 401, 401]);
    });

    it('treats an expired replay-store row as free, and prunes expired rows', async () => {
      const store = seenJtiStore(b.db);
      const past = new Date(Date.now() - 60_000);
      const future = () => new Date(Date.now() + 60_000);
      const expiredRows = async () =>
        (await b.db('seen_jtis').where('exp', '<', new Date()).count({ n: '*' }))[0];
      // The first call prunes; later ones within a minute do not, so the expired row stays.
      expect(await store.remember('did:web:x.example', 'j-0', future())).to.equal(true);
      expect(await store.remember('did:web:x.example', 'j-1', past)).to.equal(true);
      expect(await expiredRows()).to.deep.equal({ n: 1 });
      expect(await store.remember('did:web:x.example', 'j-1', future())).to.equal(
        true,
        'an expired row is free',
      );
      expect(await store.remember('did:web:x.example', 'j-1', future())).to.equal(false);
      expect(await store.remember('did:web:y.example', 'j-1', future())).to.equal(true, 'ids are per issuer');
      await store.remember('did:web:x.example', 'j-2', past);
      expect(await expiredRows()).to.deep.equal({ n: 1 });
      await seenJtiStore(b.db).remember('did:web:x.example', 'j-3', future());
      expect(await expiredRows()).to.deep.equal({ n: 0 });
    });

    it('refuses a bad signature', async () => {
      const { privateKey: otherKey } = await generateKeyPair('ES256');
      const forged = await sign({ ...aSigner, key: otherKey }, { aud: b.identity.did });
      expectRefused(await callB(forged), 401, 'bad_signature');
      const [h, p, s] = (await sign(aSigner, { aud: b.identity.did })).split('.') as [string, string, string];
      const claims = JSON.parse(Buffer.from(p, 'base64url').toString()) as JWTPayload;
      const tampered = Buffer.from(JSON.stringify({ ...claims, exp: claims.exp! + 60 })).toString(
        'base64url',
      );
      expectRefused(await callB(`${h}.${tampered}.${s}`), 401, 'bad_signature');
    });

    it('refuses an unknown kid, a kid of another DID, and a token without kid', async () => {
      const aud = b.identity.did;
      expectRefused(await callB(await sign({ ...aSigner, kid: 'no-such-key' }, { aud })), 401, 'unknown_key');
      expectRefused(
        await callB(await sign(aSigner, { aud }, { kid: `${b.identity.did}#x` })),
        401,
        'bad_kid',
      );
      expectRefused(await callB(await sign(aSigner, { aud }, { kid: aSigner.kid })), 401, 'bad_kid');
      expectRefused(await callB(await sign(aSigner, { aud }, { kid: undefined })), 401, 'bad_kid');
    });

    it('refuses iss ≠ sub, sub_jwk, alg none and HMAC', async () => {
      const aud = b.identity.did;
      expectRefused(
        await callB(await sign(aSigner, { aud, sub: b.identity.did })),
        401,
        'issuer_subject_mismatch',
      );
      expectRefused(
        await callB(await sign(aSigner, { aud, sub_jwk: { kty: 'EC' } })),
        401,
        'malformed_token',
      );
      const none = new UnsecuredJWT({ iss: aSigner.did, sub: aSigner.did, aud, jti: 'n1' })
        .setIssuedAt()
        .setExpirationTime('2m')
        .encode();
      expectRefused(await callB(none), 401, 'malformed_token');
      const secret = new TextEncoder().encode(
        JSON.stringify(a.identity.didDocument.verificationMethod![0]!.publicKeyJwk),
      );
      const hmac = await new SignJWT({ iss: aSigner.did, sub: aSigner.did, aud, jti: 'h1' })
        .setProtectedHeader({ alg: 'HS256', kid: `${aSigner.did}#${aSigner.kid}` })
        .setIssuedAt()
        .setExpirationTime('2m')
        .sign(secret);
      expectRefused(await callB(hmac), 401, 'unsupported_alg');
    });

    it('refuses DIDs it may not resolve: other methods, IP hosts, loopback without the allow flag', async () => {
      const aud = b.identity.did;
      expectRefused(
        await callB(await sign({ ...aSigner, did: 'did:key:z6MkhaXg' }, { aud })),
        401,
        'unsupported_did',
      );
      expectRefused(
        await callB(await sign({ ...aSigner, did: 'did:web:10.1.2.3%3A8443' }, { aud })),
        401,
        'did_not_allowed',
      );
      // A verifier without DID_WEB_ALLOW_HTTP (the production default) does not fetch loopback DIDs.
      const strict = await probeApp({
        ourDid: b.identity.did,
        verify: connectorTokenVerifier({ resolver: didWebResolver(), jtis: seenJtiStore(b.db) }),
        authority: b.authority,
      });
      closers.push(() => strict.close());
      const answer = await client(strict.url).get('/', {
        authorization: `Bearer ${await a.identity.issueToken(b.identity.did)}`,
      });
      expectRefused(answer, 401, 'did_not_allowed');
      expect(answer.body.message).to.include('DID_WEB_ALLOW_HTTP');
    });

    it('refuses at connect time a host name that resolves to a non-public address', async () => {
      const lookup = guardedLookup({ allowHttpLoopback: false, allowPrivateAddresses: false });
      const error = await new Promise<NodeJS.ErrnoException | null>((resolve) =>
        lookup('localhost', { all: true }, (err) => resolve(err)),
      );
      expect(error).to.have.property('code', 'EDIDADDRESS');
    });

    it('refuses an oversized, a slow, a foreign, a redirected and a missing DID document', async function () {
      this.timeout(20_000);
      const aud = b.identity.did;
      const big = await rogue.identity('big', (doc) => ({ ...doc, padding: 'x'.repeat(100 * 1024) }));
      expectRefused(await callB(await sign(big, { aud })), 401, 'did_document_too_large');

      const chunked = await rogue.identity('chunked');
      rogue.serve('chunked', (res) => {
        res.writeHead(200, { 'content-type': 'application/json' });
        res.write(`{"id":"${chunked.did}","padding":"`);
        const timer = setInterval(() => res.write('x'.repeat(16 * 1024)), 5);
        res.on('close', () => clearInterval(timer));
      });
      expectRefused(await callB(await sign(chunked, { aud })), 401, 'did_document_too_large');

      const slow = await rogue.identity('slow');
      rogue.serve('slow', (res) => {
        const timer = setTimeout(
          () => res.writeHead(200, { 'content-type': 'application/json' }).end('{}'),
          5_000,
        );
        res.on('close', () => clearTimeout(timer));
      });
      const started = Date.now();
      expectRefused(await callB(await sign(slow, { aud })), 401, 'did_timeout');
      expect(Date.now() - started).to.be.within(2_500, 4_500);

      const foreign = await rogue.identity('foreign', (doc) => ({ ...doc, id: a.identity.did }));
      expectRefused(await callB(await sign(foreign, { aud })), 401, 'did_document_invalid');

      const moved = await rogue.identity('moved');
      rogue.serve('moved', (res) => res.writeHead(302, { location: `${a.url}/.well-known/did.json` }).end());
      expectRefused(await callB(await sign(moved, { aud })), 401, 'did_unreachable');

      const text = await rogue.identity('text');
      rogue.serve('text', (res) => res.writeHead(200, { 'content-type': 'text/html' }).end('<html>'));
      expectRefused(await callB(await sign(text, { aud })), 401, 'did_document_invalid');

      const missing = await rogue.identity('missing');
      rogue.serve('missing', (res) => res.writeHead(404).end());
      expectRefused(await callB(await sign(missing, { aud })), 401, 'did_unreachable');
    });

    it('requires the key to be listed for capabilityInvocation', async () => {
      const limited = await rogue.identity('limited', (doc) => ({ ...doc, capabilityInvocation: [] }));
      expectRefused(await callB(await sign(limited, { aud: b.identity.did })), 401, 'unknown_key');
    });

    it('finds a key added to a cached DID document by fetching it once more', async () => {
      const rotating = await rogue.identity('rotating');
      const verify = connectorTokenVerifier({
        resolver: didWebResolver({ allowHttpLoopback: true, minRefreshMs: 0 }),
        jtis: seenJtiStore(b.db),
      });
      const ourDid = b.identity.did;
      expect(await verify(await sign(rotating, { aud: ourDid }), { ourDid })).to.deep.equal({
        did: rotating.did,
      });
      const { publicKey, privateKey } = await generateKeyPair('ES256');
      const jwk = await exportJWK(publicKey);
      const kid = await calculateJwkThumbprint(jwk);
      rogue.serve(
        'rotating',
        rogue.json(
          buildDidDocument(rotating.did, [
            { kid: rotating.kid, publicJwk: rotating.jwk },
            { kid, publicJwk: jwk },
          ]),
        ),
      );
      const next = await sign({ did: rotating.did, kid, key: privateKey }, { aud: ourDid });
      expect(await verify(next, { ourDid })).to.deep.equal({ did: rotating.did });
    });
  });

  describe('membership', () => {
    it('refuses a valid token of a connector the authority does not know (403 not_a_member)', async () => {
      const stranger = await rogue.identity('stranger');
      expectRefused(await callB(await sign(stranger, { aud: b.identity.did })), 403, 'not_a_member');
    });

    it('refuses an inactive member (403 inactive_member)', async () => {
      const retired = await rogue.identity('retired');
      const put = await admin().put(`/admin/v1/members/${encodeURIComponent(retired.did)}`, {
        name: 'Retired',
        roles: ['consumer'],
        active: false,
      });
      expect(put.status).to.equal(201);
      expectRefused(await callB(await sign(retired, { aud: b.identity.did })), 403, 'inactive_member');
    });

    it('answers 503 when the authority cannot be reached, and refuses everyone without AUTHORITY_URL', async () => {
      const closed = await listen((_req, res) => res.end());
      await closed.close();
      const unreachable = await probeApp({
        ourDid: b.identity.did,
        verify: b.verifyConnectorToken,
        authority: authorityClient({ url: closed.url, timeoutMs: 500 }),
      });
      const none = await probeApp({
        ourDid: b.identity.did,
        verify: b.verifyConnectorToken,
        authority: noAuthority(),
      });
      closers.push(
        () => unreachable.close(),
        () => none.close(),
      );
      const call = async (url: string) =>
        client(url).get('/', { authorization: `Bearer ${await a.identity.issueToken(b.identity.did)}` });
      expectRefused(await call(unreachable.url), 503, 'authority_unavailable');
      expectRefused(await call(none.url), 403, 'not_a_member');
    });

    it('caches answers: a yes and a no for their own time', async () => {
      const registry = await startAuthority({
        members: [{ did: 'did:web:m.example', name: 'M', roles: ['consumer'], active: true }],
      });
      closers.push(() => registry.close());
      const members = authorityClient({ url: registry.url, positiveTtlMs: 400, negativeTtlMs: 150 });
      expect(await members.member('did:web:m.example')).to.deep.equal({
        did: 'did:web:m.example',
        name: 'M',
        roles: ['consumer'],
        active: true,
      });
      expect(await members.member('did:web:nobody.example')).to.equal(null);
      await Promise.all([members.member('did:web:m.example'), members.member('did:web:nobody.example')]);
      expect(registry.lookups).to.equal(2);

      registry.upsert({ did: 'did:web:m.example', name: 'M', roles: ['consumer'], active: false });
      registry.upsert({ did: 'did:web:nobody.example', name: 'N', roles: [], active: true });
      await new Promise((r) => setTimeout(r, 200));
      expect((await members.member('did:web:m.example'))?.active).to.equal(true, 'still cached');
      expect((await members.member('did:web:nobody.example'))?.name).to.equal('N', 'the no expired first');
      await new Promise((r) => setTimeout(r, 250));
      expect((await members.member('did:web:m.example'))?.active).to.equal(false);
      expect(registry.lookups).to.equal(4);
    });
  });

  describe('authority stand-in', () => {
    it('answers look-ups and lets an admin add, change and remove members', async () => {
      const did = 'did:web:standin.example:members:x';
      const path = `/admin/v1/members/${encodeURIComponent(did)}`;
      const open = client(authority.url);
      expect((await open.get(`/v1/members/${encodeURIComponent(did)}`)).status).to.equal(404);
      expect((await open.put(path, { name: 'X' })).status).to.equal(401);
      expect((await admin().put(path, { name: 'X', roles: ['provider'] })).status).to.equal(201);
      const found = await open.get(`/v1/members/${encodeURIComponent(did)}`);
      expect(found.status).to.equal(200);
      expect(found.body).to.deep.equal({ did, name: 'X', roles: ['provider'], active: true });
      const changed = await admin().put(path, { name: 'X2', roles: [], active: false });
      expect(changed.status).to.equal(200);
      expect(changed.body).to.deep.equal({ did, name: 'X2', roles: [], active: false });
      expect((await admin().put(path, { roles: 'provider' })).status).to.equal(400);
      const listed = await admin().get('/admin/v1/members');
      expect(listed.body.items.map((m: { did: string }) => m.did)).to.include(did);
      expect((await admin().delete(path)).status).to.equal(204);
      expect((await open.get(`/v1/members/${encodeURIComponent(did)}`)).status).to.equal(404);
    });
  });
});
