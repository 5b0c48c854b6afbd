import type { Db } from './knex.js';
import { pageBySeq, type PageRequest } from './paging.js';
import { toRfc3339 } from '../domain/time.js';
import type { Party } from '../domain/negotiation.js';

export interface AgreementRecord {
  id: string;
  negotiation_id: string;
  role: Party;
  provider_did: string;
  consumer_did: string;
  dataset_id: string;
  offer_id: string | null;
  agreement: Record<string, unknown>;
  narrowing: Record<string, unknown> | null;
  connection_alias: string | null;
  state: string;
  signed_at: string;
  created_at: string;
}

type Row = Omit<AgreementRecord, 'signed_at' | 'created_at'> & {
  seq: number;
  signed_at: Date;
  created_at: Date;
};

const toRecord = (r: Row): AgreementRecord => {
  const { seq: _seq, ...rest } = r;
  return { ...rest, signed_at: toRfc3339(r.signed_at), created_at: toRfc3339(r.created_at) };
};

export function agreementStore(db: Db) {
  return {
    /** Stored once per agreement id: a retried activity changes nothing. */
    async insert(a: Omit<AgreementRecord, 'created_at' | 'state'>): Promise<void> {
      await db('agreements')
        .insert({
          ...a,
          agreement: JSON.stringify(a.agreement),
          narrowing: a.narrowing === null ? null : JSON.stringify(a.narrowing),
        })
        .onConflict('id')
        .ignore();
    },
    async get(id: string): Promise<AgreementRecord | undefined> {
      const row = (await db('agreements').where({ id }).first()) as Row | undefined;
      return row ? toRecord(row) : undefined;
    },
    list: (page: PageRequest) => pageBySeq(db('agreements'), page, toRecord),
  };
}
