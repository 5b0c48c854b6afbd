import type { Db } from './knex.js';
import { pageBySeq, type PageRequest } from './paging.js';
import { toRfc3339 } from '../domain/time.js';
import type { NegotiationState, Party } from '../domain/negotiation.js';

/** The read model of one negotiation, as the workflow last wrote it. */
export interface NegotiationSnapshot {
  id: string;
  workflow_id: string;
  role: Party;
  state: NegotiationState;
  consumer_pid: string;
  provider_pid: string | null;
  counterparty_did: string;
  counterparty_address: string | null;
  dataset_id: string | null;
  offer_id: string | null;
  agreement_id: string | null;
  purpose: string | null;
  offer: Record<string, unknown>;
  connection_alias: string | null;
  error: string | null;
  approval: string | null;
  expires_at: string | null;
  decided_by: string | null;
  decided_at: string | null;
  narrowing: Record<string, unknown> | null;
  version: number;
}

export interface HistoryEntry {
  at: string;
  state: NegotiationState;
  message_type: string | null;
  direction: 'inbound' | 'outbound' | 'internal' | null;
  evidence_id: string | null;
  note: string | null;
}

export type NegotiationRecord = NegotiationSnapshot & { created_at: string; updated_at: string };

type Row = Omit<NegotiationRecord, 'expires_at' | 'decided_at' | 'created_at' | 'updated_at'> & {
  seq: number;
  expires_at: Date | null;
  decided_at: Date | null;
  created_at: Date;
  updated_at: Date;
};

const ts = (d: Date | null) => (d ? toRfc3339(d) : null);

const toRecord = (r: Row): NegotiationRecord => ({
  ...r,
  expires_at: ts(r.expires_at),
  decided_at: ts(r.decided_at),
  created_at: toRfc3339(r.created_at),
  updated_at: toRfc3339(r.updated_at),
});

export interface NegotiationFilter {
  role?: Party;
  state?: NegotiationState;
}

export function negotiationStore(db: Db) {
  return {
    /**
     * Writes a snapshot unless a newer version is already stored (activities may be retried
     * or run late); the history entry of this version is written once.
     */
    async record(snapshot: NegotiationSnapshot, entry: HistoryEntry | null): Promise<void> {
      const row = {
        ...snapshot,
        offer: JSON.stringify(snapshot.offer),
        narrowing: snapshot.narrowing === null ? null : JSON.stringify(snapshot.narrowing),
        updated_at: db.fn.now(),
      };
      await db.transaction(async (trx) => {
        await trx('negotiations')
          .insert(row)
          .onConflict('id')
          .merge()
          .where('negotiations.version', '<', snapshot.version);
        if (entry) {
          await trx('negotiation_history')
            .insert({ negotiation_id: snapshot.id, version: snapshot.version, ...entry })
            .onConflict(['negotiation_id', 'version'])
            .ignore();
        }
      });
    },
    async get(id: string): Promise<NegotiationRecord | undefined> {
      const row = (await db('negotiations').where({ id }).first()) as Row | undefined;
      return row ? toRecord(row) : undefined;
    },
    /** The provider-side negotiation a consumer already started with this consumerPid. */
    async findByConsumerPid(role: Party, counterpartyDid: string, consumerPid: string) {
      const row = (await db('negotiations')
        .where({ role, counterparty_did: counterpartyDid, consumer_pid: consumerPid })
        .first()) as Row | undefined;
      return row ? toRecord(row) : undefined;
    },
    list(filter: NegotiationFilter, page: PageRequest) {
      const q = db('negotiations');
      if (filter.role) void q.where({ role: filter.role });
      if (filter.state) void q.where({ state: filter.state });
      return pageBySeq(q, page, toRecord);
    },
    async history(id: string): Promise<HistoryEntry[]> {
      const rows: Array<HistoryEntry & { at: Date }> = await db('negotiation_history')
        .where({ negotiation_id: id })
        .orderBy('version')
        .select('at', 'state', 'message_type', 'direction', 'evidence_id', 'note');
      return rows.map((r) => ({ ...r, at: toRfc3339(r.at) }));
    },
  };
}
