/**
 * Storage of the provider data plane: transfer access tokens (hashed), the lease of the
 * active instance, and the request-log setting. The rules (when a token is valid, what a
 * refresh does, who serves) live in gateway/dataplane/; these are the statements they need.
 */
import type { Knex } from 'knex';

export interface TokenRow {
  seq: number;
  id: string;
  transfer_id: string;
  agreement_id: string;
  consumer_did: string;
  token_hash: string;
  issue_key: string | null;
  predecessor_id: string | null;
  endpoint: string;
  ttl_seconds: number;
  issued_at: Date;
  expires_at: Date;
  used_at: Date | null;
  revoked_at: Date | null;
}

/** A usable token with how long it has left by the database's clock (callers' clocks may differ). */
export interface UsableTokenRow extends TokenRow {
  remaining_ms: number;
}

export interface NewToken {
  id: string;
  transfer_id: string;
  agreement_id: string;
  consumer_did: string;
  token_hash: string;
  issue_key: string | null;
  predecessor_id: string | null;
  endpoint: string;
  ttl_seconds: number;
}

/** A token row is usable when it is neither revoked nor expired (by the database's clock). */
const usable = (q: Knex.QueryBuilder, db: Knex | Knex.Transaction) =>
  q.whereNull('revoked_at').andWhere('expires_at', '>', db.fn.now());

export function dataplaneTokenStore(db: Knex | Knex.Transaction) {
  return {
    /** Serializes token changes of one transfer (issue, refresh, revoke) inside a transaction. */
    async lockTransfer(transferId: string): Promise<void> {
      await db.raw('SELECT pg_advisory_xact_lock(hashtextextended(?, 7))', [`dataplane-token:${transferId}`]);
    },

    /** The usable token with this hash, or undefined. */
    async findUsable(
      tokenHash: string,
      options: { forUpdate?: boolean } = {},
    ): Promise<UsableTokenRow | undefined> {
      const q = usable(db('dataplane_tokens').where({ token_hash: tokenHash }), db).first(
        '*',
        db.raw('(EXTRACT(EPOCH FROM (expires_at - now())) * 1000)::float8 AS remaining_ms'),
      );
      if (options.forUpdate) void q.forUpdate();
      const row = (await q) as (TokenRow & { remaining_ms: string | number }) | undefined;
      return row ? { ...row, remaining_ms: Number(row.remaining_ms) } : undefined;
    },

    async findByHash(tokenHash: string): Promise<TokenRow | undefined> {
      return (await db('dataplane_tokens').where({ token_hash: tokenHash }).first()) as TokenRow | undefined;
    },

    /**
     * Inserts a token; a token with the same issue key (a retried issue) is replaced by the new
     * one, so the retry gets a working token and the first one, which nobody received, stops working.
     */
    async insert(token: NewToken): Promise<TokenRow> {
      const expires = db.raw('now() + make_interval(secs => ?)', [token.ttl_seconds]);
      const insert = db('dataplane_tokens').insert({ ...token, expires_at: expires });
      const query =
        token.issue_key === null
          ? insert
          : insert.onConflict('issue_key').merge({
              id: token.id,
              token_hash: token.token_hash,
              endpoint: token.endpoint,
              ttl_seconds: token.ttl_seconds,
              issued_at: db.fn.now(),
              expires_at: expires,
              used_at: null,
              revoked_at: null,
            });
      const [row] = (await query.returning('*')) as TokenRow[];
      return row!;
    },

    /**
     * Revokes every token of a transfer that is still in force, except the one named. The
     * caller sends the transfer's access notice (gateway/access-cache.ts) in the same transaction.
     */
    async revokeTransfer(transferId: string, exceptId?: string): Promise<number> {
      const q = db('dataplane_tokens').where({ transfer_id: transferId }).whereNull('revoked_at');
      if (exceptId) void q.andWhereNot({ id: exceptId });
      return q.update({ revoked_at: db.fn.now() });
    },

    /**
     * The first use of a token acknowledges it: its predecessor (the token it was refreshed
     * from) stops working now. Later uses change nothing, so a read costs no write.
     */
    async markUsed(row: TokenRow): Promise<void> {
      if (row.used_at !== null) return;
      await db('dataplane_tokens')
        .where({ id: row.id })
        .whereNull('used_at')
        .update({ used_at: db.fn.now() });
      if (row.predecessor_id !== null) {
        await db('dataplane_tokens')
          .where({ id: row.predecessor_id })
          .whereNull('revoked_at')
          .update({ revoked_at: db.fn.now() });
      }
    },

    /** Successors of a token that were never used (their refresh answer was lost): revoked. */
    async revokeUnusedSuccessors(id: string): Promise<void> {
      await db('dataplane_tokens')
        .where({ predecessor_id: id })
        .whereNull('used_at')
        .whereNull('revoked_at')
        .update({ revoked_at: db.fn.now() });
    },
  };
}
export type DataplaneTokenStore = ReturnType<typeof dataplaneTokenStore>;

export interface LeaseState {
  holder: string;
  expires_at: Date;
  /** Until expires_at by the database's clock (callers' clocks may differ from it). */
  remaining_ms: number;
}

const REMAINING_MS = 'GREATEST(0, EXTRACT(EPOCH FROM (expires_at - now())) * 1000)::float8 AS remaining_ms';

export function dataplaneLeaseStore(db: Knex) {
  return {
    /**
     * Takes or renews the lease when it is free, expired or already ours (one statement, so
     * two instances can never both win). Returns the holder after the attempt.
     */
    async acquire(name: string, holder: string, ttlMs: number): Promise<LeaseState> {
      const result = await db.raw<{ rows: LeaseState[] }>(
        `INSERT INTO dataplane_leases (name, holder, expires_at, acquired_at)
           VALUES (?, ?, now() + make_interval(secs => ?), now())
         ON CONFLICT (name) DO UPDATE
           SET holder = EXCLUDED.holder,
               expires_at = EXCLUDED.expires_at,
               acquired_at = CASE WHEN dataplane_leases.holder = EXCLUDED.holder
                                  THEN dataplane_leases.acquired_at ELSE now() END
           WHERE dataplane_leases.holder = EXCLUDED.holder OR dataplane_leases.expires_at < now()
         RETURNING holder, expires_at, ${REMAINING_MS}`,
        [name, holder, ttlMs / 1000],
      );
      const won = result.rows[0];
      if (won) return won;
      const current = await db('dataplane_leases')
        .where({ name })
        .first<LeaseState | undefined>('holder', 'expires_at', db.raw(REMAINING_MS));
      // Released between the two statements: nobody holds it; the next attempt takes it.
      return current ?? { holder: '', expires_at: new Date(0), remaining_ms: 0 };
    },
    /**
     * Gives the lease up at once (a clean stop) and tells the other instances, so one of them
     * takes over without waiting for the lease to run out.
     */
    async release(name: string, holder: string): Promise<void> {
      await db.transaction(async (trx) => {
        const released = await trx('dataplane_leases').where({ name, holder }).delete();
        if (released > 0) await trx.raw('SELECT pg_notify(?, ?)', [LEASE_CHANNEL, name]);
      });
    },
  };
}

/** NOTIFY channels (payloads are hints only: listeners read the row itself). */
export const LEASE_CHANNEL = 'dataplane_lease';
export const REQUEST_LOG_CHANNEL = 'request_log';

export const REQUEST_LOG_LEVELS = ['off', 'errors', 'warnings', 'all'] as const;
export type RequestLogLevel = (typeof REQUEST_LOG_LEVELS)[number];

/** Spec "Request-log setting". */
export interface RequestLogSetting {
  level: RequestLogLevel;
  slow_ms: number;
}

/** Until an operator says otherwise: failures are logged, and requests slower than a second count as slow. */
export const DEFAULT_REQUEST_LOG: RequestLogSetting = { level: 'errors', slow_ms: 1000 };

const REQUEST_LOG_KEY = 'dataplane.request_log';

/** A stored value that no longer has the shape (hand-edited, older version) falls back to the default. */
function readRequestLog(value: unknown): RequestLogSetting {
  const v = value as Partial<RequestLogSetting> | null | undefined;
  const level = REQUEST_LOG_LEVELS.find((l) => l === v?.level);
  const slow = v?.slow_ms;
  if (!level || typeof slow !== 'number' || !Number.isInteger(slow) || slow < 10 || slow > 60_000)
    return DEFAULT_REQUEST_LOG;
  return { level, slow_ms: slow };
}

export function requestLogStore(db: Knex) {
  return {
    async get(): Promise<RequestLogSetting> {
      const row = await db('settings').where({ key: REQUEST_LOG_KEY }).first<{ value: unknown }>('value');
      return row ? readRequestLog(row.value) : DEFAULT_REQUEST_LOG;
    },
    /** Stores the setting and notifies every data plane instance; the notice leaves on commit. */
    async put(setting: RequestLogSetting): Promise<RequestLogSetting> {
      const value = { level: setting.level, slow_ms: setting.slow_ms };
      await db.transaction(async (trx) => {
        await trx('settings')
          .insert({ key: REQUEST_LOG_KEY, value: JSON.stringify(value), updated_at: trx.fn.now() })
          .onConflict('key')
          .merge();
        await trx.raw('SELECT pg_notify(?, ?)', [REQUEST_LOG_CHANNEL, JSON.stringify(value)]);
      });
      return value;
    },
  };
}

/**
 * The contract policy of one of our agreements as consumer (the gateway decides from its own
 * copy whether answers must be signed, never from what the provider sends).
 */
export async function consumerAgreementPolicy(
  db: Knex,
  agreementId: string,
): Promise<Record<string, unknown> | undefined> {
  const row = await db('agreements')
    .where({ id: agreementId, role: 'consumer' })
    .first<{ agreement: Record<string, unknown> } | undefined>('agreement');
  return row?.agreement;
}
