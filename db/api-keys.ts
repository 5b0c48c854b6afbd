import type { Db } from './knex.js';
import { pageBySeq, type PageRequest } from './paging.js';
import { toRfc3339 } from '../domain/time.js';
import { accessCachesOf, dropCachedAccess, notifyAccessChange } from '../gateway/access-cache.js';

/** `last_used_at` is informative: written at most once a minute per key. */
const TOUCH_INTERVAL_MS = 60_000;

export const API_KEY_SCOPES = ['management', 'gateway'] as const;
export type ApiKeyScope = (typeof API_KEY_SCOPES)[number];

export interface ApiKeyRecord {
  id: string;
  name: string;
  role: string;
  scopes: string[];
  /** `management` keys call /api/v1; `gateway` keys call /gateway only (applications). */
  scope: ApiKeyScope;
  created_at: string;
  last_used_at: string | null;
  revoked_at: string | null;
}

interface Row extends Omit<ApiKeyRecord, 'created_at' | 'last_used_at' | 'revoked_at'> {
  seq: number;
  secret_hash: string;
  created_at: Date;
  last_used_at: Date | null;
  revoked_at: Date | null;
}

const toRecord = (r: Row): ApiKeyRecord => ({
  id: r.id,
  name: r.name,
  role: r.role,
  scopes: r.scopes,
  scope: r.scope,
  created_at: toRfc3339(r.created_at),
  last_used_at: r.last_used_at ? toRfc3339(r.last_used_at) : null,
  revoked_at: r.revoked_at ? toRfc3339(r.revoked_at) : null,
});

export function apiKeyStore(db: Db) {
  const caches = accessCachesOf(db);
  return {
    async insert(key: {
      id: string;
      name: string;
      role: string;
      scopes: string[];
      scope: ApiKeyScope;
      secret_hash: string;
    }) {
      const [row] = (await db('api_keys').insert(key).returning('*')) as Row[];
      return toRecord(row!);
    },
    /**
     * The key with its secret hash, for verification; revoked keys included (the caller
     * decides). Cached per key id (gateway/access-cache.ts): revoke() drops the entry here and
     * in every other process. Unknown ids are not cached.
     */
    findForVerification(id: string): Promise<(ApiKeyRecord & { secret_hash: string }) | undefined> {
      return caches.apiKeys.get(
        id,
        async () => {
          const row = (await db('api_keys').where({ id }).first()) as Row | undefined;
          return row ? { ...toRecord(row), secret_hash: row.secret_hash } : undefined;
        },
        { keep: (found) => found !== undefined },
      );
    },
    async get(id: string) {
      const row = (await db('api_keys').where({ id }).first()) as Row | undefined;
      return row ? toRecord(row) : undefined;
    },
    list: (page: PageRequest) => pageBySeq(db('api_keys'), page, toRecord),
    async count(): Promise<number> {
      const row = (await db('api_keys').count<{ count: number }[]>('* as count').first())!;
      return Number(row.count);
    },
    /** Revoked for the next request, in this process and (by the notice) in every other. */
    async revoke(id: string) {
      const row = await db.transaction(async (trx) => {
        const [revoked] = (await trx('api_keys')
          .where({ id })
          .update({ revoked_at: trx.raw('coalesce(revoked_at, now())') })
          .returning('*')) as Row[];
        if (revoked) await notifyAccessChange(trx, { kind: 'api_key', id });
        return revoked;
      });
      dropCachedAccess(db, { kind: 'api_key', id });
      return row ? toRecord(row) : undefined;
    },
    /**
     * Last-used times are informative; the row is written at most once a minute, and this
     * process does not even ask within a minute of its own last write.
     */
    async touch(id: string) {
      const now = performance.now();
      const last = caches.lastTouched.get(id);
      if (last !== undefined && now - last < TOUCH_INTERVAL_MS) return;
      if (caches.lastTouched.size >= 10_000) caches.lastTouched.clear();
      caches.lastTouched.set(id, now);
      await db('api_keys')
        .where({ id })
        .andWhere(
          (q) =>
            void q
              .whereNull('last_used_at')
              .orWhere('last_used_at', '<', db.raw("now() - interval '1 minute'")),
        )
        .update({ last_used_at: db.fn.now() });
    },
  };
}
export type ApiKeyStore = ReturnType<typeof apiKeyStore>;
