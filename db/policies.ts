import type { Db } from './knex.js';
import { pageBySeq, type PageRequest } from './paging.js';
import type { PolicyRules } from '../domain/policy.js';
import { toRfc3339 } from '../domain/time.js';

export interface PolicyRecord extends PolicyRules {
  id: string;
  title: string | null;
  description: string | null;
  created_at: string;
}

type Row = Omit<PolicyRecord, 'created_at'> & { seq: number; created_at: Date };

const toRecord = (r: Row): PolicyRecord => ({
  id: r.id,
  title: r.title,
  description: r.description,
  permissions: r.permissions,
  prohibitions: r.prohibitions,
  obligations: r.obligations,
  created_at: toRfc3339(r.created_at),
});

export function policyStore(db: Db) {
  return {
    async insert(p: Omit<PolicyRecord, 'created_at'>): Promise<PolicyRecord> {
      const [row] = (await db('policies')
        .insert({
          ...p,
          permissions: JSON.stringify(p.permissions),
          prohibitions: JSON.stringify(p.prohibitions),
          obligations: JSON.stringify(p.obligations),
        })
        .returning('*')) as Row[];
      return toRecord(row!);
    },
    async get(id: string): Promise<PolicyRecord | undefined> {
      const row = (await db('policies').where({ id }).first()) as Row | undefined;
      return row ? toRecord(row) : undefined;
    },
    async exists(id: string): Promise<boolean> {
      return (await db('policies').where({ id }).first('id')) !== undefined;
    },
    list: (page: PageRequest) => pageBySeq(db('policies'), page, toRecord),
  };
}
