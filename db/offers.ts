import type { Db } from './knex.js';
import { pageBySeq, type PageRequest } from './paging.js';
import { toRfc3339 } from '../domain/time.js';

import type { ApprovalMode } from '../domain/negotiation.js';

// The modes are a negotiation rule (domain/negotiation.ts); kept importable from here.
export { APPROVAL_MODES, type ApprovalMode } from '../domain/negotiation.js';

export interface OfferRecord {
  id: string;
  asset_id: string;
  access_policy_id: string;
  contract_policy_id: string;
  approval: ApprovalMode;
  created_at: string;
}

type Row = Omit<OfferRecord, 'created_at'> & { seq: number; created_at: Date };

const toRecord = (r: Row): OfferRecord => ({
  id: r.id,
  asset_id: r.asset_id,
  access_policy_id: r.access_policy_id,
  contract_policy_id: r.contract_policy_id,
  approval: r.approval,
  created_at: toRfc3339(r.created_at),
});

export function offerStore(db: Db) {
  return {
    async insert(o: Omit<OfferRecord, 'created_at'>): Promise<OfferRecord> {
      const [row] = (await db('offers').insert(o).returning('*')) as Row[];
      return toRecord(row!);
    },
    async replace(o: Omit<OfferRecord, 'created_at'>): Promise<OfferRecord | undefined> {
      const [row] = (await db('offers')
        .where({ id: o.id })
        .update({ ...o, updated_at: db.fn.now() })
        .returning('*')) as Row[];
      return row ? toRecord(row) : undefined;
    },
    async get(id: string): Promise<OfferRecord | undefined> {
      const row = (await db('offers').where({ id }).first()) as Row | undefined;
      return row ? toRecord(row) : undefined;
    },
    list: (page: PageRequest) => pageBySeq(db('offers'), page, toRecord),
    async forProduct(assetId: string): Promise<OfferRecord[]> {
      return ((await db('offers').where({ asset_id: assetId }).orderBy('seq')) as Row[]).map(toRecord);
    },
  };
}
