import type { Db } from './knex.js';
import { pageBySeq, type PageRequest } from './paging.js';
import { toRfc3339 } from '../domain/time.js';
import type { Party } from '../domain/negotiation.js';
import type { TransferState } from '../domain/transfer.js';
import type { DataAddress } from '../gateway/dataplane/access.js';

/** The read model of one transfer, as the workflow last wrote it. */
export interface TransferSnapshot {
  id: string;
  workflow_id: string;
  role: Party;
  state: TransferState;
  consumer_pid: string;
  provider_pid: string | null;
  agreement_id: string;
  counterparty_did: string;
  counterparty_address: string | null;
  dataset_id: string | null;
  format: string;
  connection_alias: string | null;
  error: string | null;
  /** Unmasked on the consumer side (the gateway needs the token); mask it for every read. */
  data_address: DataAddress | null;
  dataplane_id: string | null;
  dataplane_endpoint: string | null;
  delegation_id: string | null;
  flow_state: string | null;
  version: number;
}

export interface TransferHistoryEntry {
  at: string;
  state: TransferState;
  message_type: string | null;
  direction: 'inbound' | 'outbound' | 'internal' | null;
  evidence_id: string | null;
  note: string | null;
}

export type TransferRecord = TransferSnapshot & { created_at: string; updated_at: string };

type Row = Omit<TransferRecord, 'created_at' | 'updated_at'> & {
  seq: number;
  created_at: Date;
  updated_at: Date;
};

const toRecord = (r: Row): TransferRecord => {
  const { seq: _seq, ...rest } = r;
  return { ...rest, created_at: toRfc3339(r.created_at), updated_at: toRfc3339(r.updated_at) };
};

export interface TransferFilter {
  role?: Party;
  state?: TransferState;
  agreement_id?: string;
  connection_alias?: string;
}

export function transferStore(db: Db) {
  return {
    /**
     * Writes a snapshot unless a newer version is already stored (activities may be retried
     * or run late); the history entry of this version is written once.
     */
    async record(snapshot: TransferSnapshot, entry: TransferHistoryEntry | null): Promise<void> {
      const row = {
        ...snapshot,
        data_address: snapshot.data_address === null ? null : JSON.stringify(snapshot.data_address),
        updated_at: db.fn.now(),
      };
      await db.transaction(async (trx) => {
        await trx('transfers')
          .insert(row)
          .onConflict('id')
          .merge()
          .where('transfers.version', '<', snapshot.version);
        if (entry) {
          await trx('transfer_history')
            .insert({ transfer_id: snapshot.id, version: snapshot.version, ...entry })
            .onConflict(['transfer_id', 'version'])
            .ignore();
        }
      });
    },
    async get(id: string): Promise<TransferRecord | undefined> {
      const row = (await db('transfers').where({ id }).first()) as Row | undefined;
      return row ? toRecord(row) : undefined;
    },
    /** The provider-side transfer a consumer already requested with this consumerPid. */
    async findByConsumerPid(role: Party, counterpartyDid: string, consumerPid: string) {
      const row = (await db('transfers')
        .where({ role, counterparty_did: counterpartyDid, consumer_pid: consumerPid })
        .first()) as Row | undefined;
      return row ? toRecord(row) : undefined;
    },
    list(filter: TransferFilter, page: PageRequest) {
      const q = db('transfers');
      for (const key of ['role', 'state', 'agreement_id', 'connection_alias'] as const)
        if (filter[key]) void q.where(key, filter[key]);
      return pageBySeq(q, page, toRecord);
    },
    async history(id: string): Promise<TransferHistoryEntry[]> {
      const rows: Array<TransferHistoryEntry & { at: Date }> = await db('transfer_history')
        .where({ transfer_id: id })
        .orderBy('version')
        .select('at', 'state', 'message_type', 'direction', 'evidence_id', 'note');
      return rows.map((r) => ({ ...r, at: toRfc3339(r.at) }));
    },
    /** Transfers under an agreement that have not ended, on our side (either role). */
    async runningUnder(agreementId: string): Promise<Array<{ id: string; workflow_id: string }>> {
      return db('transfers')
        .where({ agreement_id: agreementId })
        .whereNotIn('state', ['COMPLETED', 'TERMINATED'])
        .orderBy('seq')
        .select('id', 'workflow_id');
    },
  };
}

/** How an agreement ended; absent while it is active. */
export interface AgreementEnd {
  endedAt: string;
  endedBy: Party;
  reason: string | null;
}

/** The end of agreements (state `ended`, which the data plane refuses to serve). */
export function agreementEnds(db: Db) {
  return {
    /**
     * Ends an active agreement; an agreement that has ended already keeps how it ended, so the
     * same termination again gets the same answer. Undefined for an unknown agreement.
     */
    async end(agreementId: string, endedBy: Party, reason: string | null): Promise<AgreementEnd | undefined> {
      await db('agreements')
        .where({ id: agreementId, state: 'active' })
        .update({ state: 'ended', ended_at: db.fn.now(), ended_by: endedBy, end_reason: reason });
      return this.get(agreementId);
    },
    async get(agreementId: string): Promise<AgreementEnd | undefined> {
      const row = await db('agreements')
        .where({ id: agreementId })
        .whereNotNull('ended_at')
        .first<{ ended_at: Date; ended_by: Party; end_reason: string | null } | undefined>(
          'ended_at',
          'ended_by',
          'end_reason',
        );
      return row
        ? { endedAt: toRfc3339(row.ended_at), endedBy: row.ended_by, reason: row.end_reason }
        : undefined;
    },
  };
}
