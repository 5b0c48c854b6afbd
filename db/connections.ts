/**
 * Connections: the consumer's named subscriptions (alias → agreement → running transfer), and
 * which applications (gateway API keys) may use each one. A negotiation started with an alias
 * names the connection (trigger in migration 0006); the transfer started for it points the
 * connection at itself.
 */
import type { Db } from './knex.js';
import { pageBySeq, type PageRequest } from './paging.js';
import { toRfc3339 } from '../domain/time.js';
import type { DataAddress } from '../gateway/dataplane/access.js';
import {
  accessChanged,
  dropCachedAccess,
  notifyAccessChange,
  type AccessChange,
} from '../gateway/access-cache.js';

export type AppAccess = 'read' | 'read_write';

/** What the gateway needs to forward a request for an alias (contract with the data plane task). */
export interface GatewayRoute {
  alias: string;
  agreementId: string | null;
  transferId: string | null;
  transferState: string | null;
  /** Unmasked: the token the gateway presents to the provider's data plane. */
  dataAddress: DataAddress | null;
  providerDid: string | null;
}

/** The route for an alias, or null for an unknown alias. */
export async function findGatewayRoute(db: Db, alias: string): Promise<GatewayRoute | null> {
  const row = await db('connections as c')
    .leftJoin('transfers as t', 't.id', 'c.transfer_id')
    .where('c.alias', alias)
    .first<
      | {
          alias: string;
          agreement_id: string | null;
          transfer_id: string | null;
          provider_did: string | null;
          transfer_state: string | null;
          data_address: DataAddress | null;
        }
      | undefined
    >(
      'c.alias',
      'c.agreement_id',
      'c.transfer_id',
      'c.provider_did',
      't.state as transfer_state',
      't.data_address',
    );
  if (!row) return null;
  return {
    alias: row.alias,
    agreementId: row.agreement_id,
    transferId: row.transfer_id,
    transferState: row.transfer_state,
    dataAddress: row.data_address,
    providerDid: row.provider_did,
  };
}

/** Whether an application (API key) may use a connection, and how. */
export async function findConnectionApp(
  db: Db,
  alias: string,
  apiKeyId: string,
): Promise<{ access: AppAccess } | null> {
  const row = await db('connection_apps')
    .where({ alias, api_key_id: apiKeyId })
    .first<{ access: AppAccess } | undefined>('access');
  return row ?? null;
}

export interface ConnectionApp {
  api_key_id: string;
  access: AppAccess;
  created_at: string;
  updated_at: string;
}

export interface ConnectionRecord {
  alias: string;
  negotiation_id: string | null;
  agreement_id: string | null;
  transfer_id: string | null;
  transfer_state: string | null;
  provider_did: string | null;
  apps: ConnectionApp[];
  created_at: string;
  updated_at: string;
}

type Row = Omit<ConnectionRecord, 'apps' | 'created_at' | 'updated_at'> & {
  seq: number;
  created_at: Date;
  updated_at: Date;
};

type AppRow = Omit<ConnectionApp, 'created_at' | 'updated_at'> & {
  alias: string;
  created_at: Date;
  updated_at: Date;
};

const toApp = (r: AppRow): ConnectionApp => ({
  api_key_id: r.api_key_id,
  access: r.access,
  created_at: toRfc3339(r.created_at),
  updated_at: toRfc3339(r.updated_at),
});

/**
 * A change of a connection or its applications, committed with its notice; the gateway's
 * caches (gateway/access-cache.ts) drop the connection here and in every other process.
 */
async function changingConnection<T>(db: Db, alias: string, change: (trx: Db) => Promise<T>): Promise<T> {
  const notice: AccessChange = { kind: 'connection', alias };
  const result = await db.transaction(async (trx) => {
    const changed = await change(trx);
    await notifyAccessChange(trx, notice);
    return changed;
  });
  dropCachedAccess(db, notice);
  return result;
}

export function connectionStore(db: Db) {
  const base = () =>
    db('connections as c')
      .leftJoin('transfers as t', 't.id', 'c.transfer_id')
      .select(
        'c.seq',
        'c.alias',
        'c.negotiation_id',
        'c.agreement_id',
        'c.transfer_id',
        'c.provider_did',
        'c.created_at',
        'c.updated_at',
        't.state as transfer_state',
      );

  async function withApps(rows: Row[]): Promise<ConnectionRecord[]> {
    const apps = rows.length
      ? ((await db('connection_apps')
          .whereIn(
            'alias',
            rows.map((r) => r.alias),
          )
          .orderBy(['alias', 'api_key_id'])) as AppRow[])
      : [];
    return rows.map(({ seq: _seq, ...r }) => ({
      ...r,
      apps: apps.filter((a) => a.alias === r.alias).map(toApp),
      created_at: toRfc3339(r.created_at),
      updated_at: toRfc3339(r.updated_at),
    }));
  }

  return {
    async get(alias: string): Promise<ConnectionRecord | undefined> {
      const row = (await base().where('c.alias', alias).first()) as Row | undefined;
      return row ? (await withApps([row]))[0] : undefined;
    },
    async list(page: PageRequest) {
      const rows = await pageBySeq(db('connections'), page, (r: Omit<Row, 'transfer_state'>) => r);
      const ids = rows.items.map((r) => r.transfer_id).filter((id): id is string => id !== null);
      const states = new Map<string, string>(
        ids.length
          ? (
              await db('transfers')
                .whereIn('id', ids)
                .select<Array<{ id: string; state: string }>>('id', 'state')
            ).map((t) => [t.id, t.state])
          : [],
      );
      const items = rows.items.map((r) => ({
        ...r,
        transfer_state: r.transfer_id ? (states.get(r.transfer_id) ?? null) : null,
      }));
      return { items: await withApps(items), next_cursor: rows.next_cursor };
    },
    /** Points a connection at its transfer (creating the connection when the alias is new). */
    async attachTransfer(c: {
      alias: string;
      agreementId: string;
      transferId: string;
      providerDid: string;
    }): Promise<{ previousTransferId: string | null }> {
      return changingConnection(db, c.alias, async (trx) => {
        const rows: Array<{ transfer_id: string | null }> = await trx('connections')
          .where({ alias: c.alias })
          .forUpdate()
          .select('transfer_id');
        const before = rows[0];
        await trx('connections')
          .insert({
            alias: c.alias,
            agreement_id: c.agreementId,
            transfer_id: c.transferId,
            provider_did: c.providerDid,
          })
          .onConflict('alias')
          .merge({
            agreement_id: c.agreementId,
            transfer_id: c.transferId,
            provider_did: c.providerDid,
            updated_at: trx.fn.now(),
          });
        const previous = before?.transfer_id ?? null;
        return { previousTransferId: previous === c.transferId ? null : previous };
      });
    },
    /**
     * The state or data address of the connection's transfer was recorded (the transfers read
     * model, after its commit): the gateway's cached route goes, here and in every other process.
     */
    async transferRecorded(alias: string): Promise<void> {
      await accessChanged(db, { kind: 'connection', alias });
    },
    async remove(alias: string): Promise<boolean> {
      return (await changingConnection(db, alias, (trx) => trx('connections').where({ alias }).delete())) > 0;
    },
    async setApp(alias: string, apiKeyId: string, access: AppAccess): Promise<void> {
      await changingConnection(db, alias, (trx) =>
        trx('connection_apps')
          .insert({ alias, api_key_id: apiKeyId, access })
          .onConflict(['alias', 'api_key_id'])
          .merge({ access, updated_at: trx.fn.now() }),
      );
    },
    async removeApp(alias: string, apiKeyId: string): Promise<boolean> {
      const removed = await changingConnection(db, alias, (trx) =>
        trx('connection_apps').where({ alias, api_key_id: apiKeyId }).delete(),
      );
      return removed > 0;
    },
  };
}
