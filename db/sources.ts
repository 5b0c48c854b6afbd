import type { Db } from './knex.js';
import { pageBySeq, type PageRequest } from './paging.js';
import type { SourceRecord } from '../domain/sources.js';
import { toRfc3339 } from '../domain/time.js';

type Row = Omit<SourceRecord, 'created_at'> & { seq: number; created_at: Date };

const toRecord = (r: Row): SourceRecord => ({
  id: r.id,
  name: r.name,
  protocol: r.protocol,
  health_path: r.health_path,
  objects: r.objects,
  backend: r.backend,
  links: r.links,
  created_at: toRfc3339(r.created_at),
});

const toRow = (s: Omit<SourceRecord, 'created_at'>) => ({
  id: s.id,
  name: s.name,
  protocol: s.protocol,
  health_path: s.health_path,
  objects: JSON.stringify(s.objects),
  backend: s.backend === null ? null : JSON.stringify(s.backend),
  links: JSON.stringify(s.links),
});

export function sourceStore(db: Db) {
  const q = db;
  return {
    async insert(source: Omit<SourceRecord, 'created_at'>): Promise<SourceRecord> {
      const [row] = (await q('sources').insert(toRow(source)).returning('*')) as Row[];
      return toRecord(row!);
    },
    async replace(source: Omit<SourceRecord, 'created_at'>): Promise<SourceRecord> {
      const [row] = (await q('sources')
        .where({ id: source.id })
        .update({ ...toRow(source), updated_at: q.fn.now() })
        .returning('*')) as Row[];
      return toRecord(row!);
    },
    async get(id: string, options: { forUpdate?: boolean } = {}): Promise<SourceRecord | undefined> {
      const query = q('sources').where({ id }).first();
      if (options.forUpdate) void query.forUpdate();
      const row = (await query) as Row | undefined;
      return row ? toRecord(row) : undefined;
    },
    list: (page: PageRequest) => pageBySeq(q('sources'), page, toRecord),
  };
}
