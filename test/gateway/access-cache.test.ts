/**
 * The access caches of the gateway and the data plane (gateway/access-cache.ts): what they
 * keep and for how long, what each change drops, and that a change made through another
 * database handle (as by another process) reaches them by PostgreSQL NOTIFY.
 */
import { expect } from 'chai';
import pino from 'pino';
import { createDb, migrateLatest, type Db } from '../../db/knex.js';
import { createTestDatabase } from '../support/stack.js';
import { apiKeyStore } from '../../db/api-keys.js';
import { connectionStore } from '../../db/connections.js';
import { createApiKey, verifyApiKey } from '../../auth/api-keys.js';
import {
  AccessCaches,
  accessCachesOf,
  appKey,
  readAccessNotice,
  type AccessChange,
  type CachedGrant,
} from '../../gateway/access-cache.js';
import {
  checkTransferToken,
  endpointProperty,
  issueTransferAccess,
  revokeTransferAccess,
} from '../../gateway/dataplane/access.js';
import { startDataPlaneRuntime, type DataPlaneRuntime } from '../../gateway/dataplane/runtime.js';
import type { DidResolver } from '../../auth/did-web-resolver.js';

/** A load that resolves when the test says so, counting its calls. */
function loader<T>() {
  const pending: Array<(value: T) => void> = [];
  const load = () => new Promise<T>((resolve) => pending.push(resolve));
  return { load, pending };
}

const grant = (transferId: string, agreementId: string): CachedGrant => ({
  grant: { tokenId: `tok-${transferId}`, transferId, agreementId, consumerDid: 'did:web:c', expiresAt: '' },
  remainingMs: 60_000,
});

describe('access caches', () => {
  describe('in one process', () => {
    let caches: AccessCaches;
    beforeEach(() => {
      caches = new AccessCaches();
      caches.listeningStarted();
    });

    it('shares one load among concurrent misses and keeps its value', async () => {
      const { load, pending } = loader<string>();
      const first = caches.routes.get('a', load as never);
      const second = caches.routes.get('a', load as never);
      expect(pending).to.have.length(1);
      pending[0]!('route');
      expect([await first, await second]).to.deep.equal(['route', 'route']);
      expect(await caches.routes.get('a', () => Promise.reject(new Error('not asked again')))).to.equal(
        'route',
      );
    });

    it('reads through while nothing tells it of changes (listening stopped), and starts empty again', async () => {
      caches.listeningStopped();
      let loads = 0;
      const load = () => {
        loads++;
        return Promise.resolve(null);
      };
      await caches.routes.get('a', load);
      await caches.routes.get('a', load);
      expect(loads).to.equal(2);
      caches.listeningStarted();
      await caches.routes.get('a', load);
      await caches.routes.get('a', load);
      expect(loads).to.equal(3);
    });

    it('does not keep a value read while a change came (the load was in flight)', async () => {
      const { load, pending } = loader<null>();
      const inFlight = caches.routes.get('campus', load);
      caches.drop({ kind: 'connection', alias: 'campus' });
      pending[0]!(null);
      expect(await inFlight).to.equal(null);
      let loads = 0;
      await caches.routes.get('campus', () => {
        loads++;
        return Promise.resolve(null);
      });
      expect(loads, 'the value read before the change is not served after it').to.equal(1);
    });

    it('keeps nothing a `keep` refuses, a failed load, or past an entry’s own lifetime', async () => {
      let loads = 0;
      const load = () => {
        loads++;
        return Promise.resolve(undefined);
      };
      await caches.grants.get('h', load, { keep: (g) => g !== undefined });
      await caches.grants.get('h', load, { keep: (g) => g !== undefined });
      expect(loads).to.equal(2);

      await caches.routes.get('x', () => Promise.reject(new Error('database down'))).catch(() => undefined);
      expect(await caches.routes.get('x', () => Promise.resolve(null))).to.equal(null);

      let expiring = 0;
      const short = () => {
        expiring++;
        return Promise.resolve(grant('t', 'a'));
      };
      await caches.grants.get('k', short, { lifetimeMs: () => 0 });
      await caches.grants.get('k', short, { lifetimeMs: () => 0 });
      expect(expiring, 'a token that has run out is read again').to.equal(2);
    });

    it('drops what each change concerns, and only that', async () => {
      const keep = <T>(c: { get(k: string, l: () => Promise<T>): Promise<T> }, key: string, v: T) =>
        c.get(key, () => Promise.resolve(v));
      await keep(caches.routes, 'campus', null);
      await keep(caches.routes, 'other', null);
      await keep(caches.apps, appKey('campus', 'k1'), { access: 'read' as const });
      await keep(caches.apps, appKey('other', 'k1'), { access: 'read' as const });
      await keep(caches.apps, appKey('other', 'k2'), { access: 'read' as const });
      await keep(caches.grants, 'h1', grant('t1', 'agr1'));
      await keep(caches.grants, 'h2', grant('t2', 'agr2'));
      await keep(caches.coverage, 'agr1', { refused: 'no_product' as const });
      await keep(caches.coverage, 'agr2', { refused: 'no_product' as const });

      /** Which of the given keys a cache still holds (a load that runs means it did not). */
      const held = async <T>(c: { get(k: string, l: () => Promise<T>): Promise<T> }, keys: string[]) => {
        const out: string[] = [];
        for (const k of keys) {
          let loaded = false;
          await c.get(k, () => {
            loaded = true;
            return Promise.resolve(undefined as T);
          });
          if (!loaded) out.push(k);
        }
        return out;
      };
      const drop = (change: AccessChange) => caches.drop(change);

      drop({ kind: 'connection', alias: 'campus' });
      expect(await held(caches.routes, ['campus', 'other'])).to.deep.equal(['other']);
      drop({ kind: 'api_key', id: 'k1' });
      expect(
        await held(caches.apps, [appKey('campus', 'k1'), appKey('other', 'k1'), appKey('other', 'k2')]),
      ).to.deep.equal([appKey('other', 'k2')]);
      // A transfer's tokens, and the coverage of its agreement (ending an agreement revokes them).
      drop({ kind: 'transfer', id: 't1' });
      expect(await held(caches.grants, ['h1', 'h2'])).to.deep.equal(['h2']);
      expect(await held(caches.coverage, ['agr1', 'agr2'])).to.deep.equal(['agr2']);
      drop({ kind: 'coverage' });
      expect(await held(caches.coverage, ['agr2'])).to.deep.equal([]);
    });

    it('reads notices strictly: anything unreadable drops everything', () => {
      expect(readAccessNotice('{"kind":"transfer","id":"t1"}')).to.deep.equal({ kind: 'transfer', id: 't1' });
      expect(readAccessNotice('{"kind":"connection","alias":"campus"}')).to.deep.equal({
        kind: 'connection',
        alias: 'campus',
      });
      expect(readAccessNotice('{"kind":"coverage"}')).to.deep.equal({ kind: 'coverage' });
      for (const bad of [undefined, '', 'not json', '{"kind":"transfer"}', '{"kind":"unknown","id":"x"}'])
        expect(readAccessNotice(bad)).to.deep.equal({ kind: 'all' });
    });
  });

  describe('across processes (PostgreSQL NOTIFY)', function () {
    this.timeout(60_000);
    let databaseUrl: string;
    let db: Db;
    /** Another handle on the same database: its writes reach `db`'s caches only by the notice. */
    let elsewhere: Db;
    let runtime: DataPlaneRuntime;
    let caches: AccessCaches;

    before(async () => {
      databaseUrl = await createTestDatabase('access_cache');
      db = createDb(databaseUrl);
      elsewhere = createDb(databaseUrl);
      await migrateLatest(db);
      runtime = await startDataPlaneRuntime({
        db,
        databaseUrl,
        logger: pino({ level: 'silent' }),
        leaseTtlMs: 5_000,
        signAnswer: () => Promise.reject(new Error('not used')),
        resolver: {} as DidResolver,
      });
      caches = accessCachesOf(db);
    });
    after(async () => {
      await runtime?.stop();
      await Promise.all([db?.destroy(), elsewhere?.destroy()]);
    });

    /** Resolves when this process's caches have applied a change of the given kind. */
    const dropped = (kind: AccessChange['kind']) =>
      new Promise<AccessChange>((resolve) => {
        const seen = (change: AccessChange) => {
          if (change.kind !== kind) return;
          caches.off('drop', seen);
          resolve(change);
        };
        caches.on('drop', seen);
      });

    it('caches only while its listening connection is up', () => {
      expect(caches.enabled).to.equal(true);
    });

    it('a key revoked elsewhere stops working here as soon as the notice arrives', async () => {
      const { record, key } = await createApiKey(apiKeyStore(db), {
        name: 'app',
        role: 'viewer',
        scope: 'gateway',
      });
      expect(await verifyApiKey(apiKeyStore(db), key)).to.include({ id: record.id });
      const notice = dropped('api_key');
      await apiKeyStore(elsewhere).revoke(record.id);
      expect(await notice).to.deep.equal({ kind: 'api_key', id: record.id });
      expect(await verifyApiKey(apiKeyStore(db), key)).to.equal(undefined);
    });

    it('a transfer token revoked elsewhere stops working here as soon as the notice arrives', async () => {
      const address = await issueTransferAccess(db, {
        transferId: 'tr-1',
        agreementId: 'agr-1',
        consumerDid: 'did:web:consumer',
        endpoint: 'http://127.0.0.1:9/dataplane/v1',
        issueKey: 'tr-1:start',
      });
      const token = endpointProperty(address, 'authorization')!;
      expect(await checkTransferToken(db, token)).to.include({ transferId: 'tr-1' });
      const notice = dropped('transfer');
      await revokeTransferAccess(elsewhere, 'tr-1');
      expect(await notice).to.deep.equal({ kind: 'transfer', id: 'tr-1' });
      expect(await checkTransferToken(db, token)).to.equal(undefined);
    });

    it('an app removed from a connection elsewhere loses it here as soon as the notice arrives', async () => {
      const { record } = await createApiKey(apiKeyStore(db), {
        name: 'app2',
        role: 'viewer',
        scope: 'gateway',
      });
      await db('connections').insert({ alias: 'campus' });
      await connectionStore(db).setApp('campus', record.id, 'read');
      const found = () =>
        caches.apps.get(
          appKey('campus', record.id),
          async () =>
            (await db('connection_apps').where({ alias: 'campus', api_key_id: record.id }).first('access')) ??
            null,
        );
      expect(await found()).to.deep.equal({ access: 'read' });
      const notice = dropped('connection');
      await connectionStore(elsewhere).removeApp('campus', record.id);
      await notice;
      expect(await found()).to.equal(null);
    });

    it('stops caching when the runtime stops (no more notices)', async () => {
      await runtime.stop();
      expect(caches.enabled).to.equal(false);
    });
  });
});
