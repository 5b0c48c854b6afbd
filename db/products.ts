import type { Knex } from 'knex';
import type { Db } from './knex.js';
import { pageBySeq, type PageRequest } from './paging.js';
import type { BackendBinding } from '../domain/sources.js';
import { toRfc3339 } from '../domain/time.js';

export interface Selection {
  kind: 'all' | 'points';
}

export interface ProductRecord {
  id: string;
  title: string;
  description: string | null;
  keywords: string[];
  objects: string[];
  sort: string | null;
  selection: Selection;
  points: string[] | null;
  points_resolved_at: string | null;
  source_id: string | null;
  delegation_id: string | null;
  backend: BackendBinding | null;
  content_type: string;
  profile: string;
  created_at: string;
}

type Row = Omit<ProductRecord, 'created_at' | 'points_resolved_at'> & {
  seq: number;
  created_at: Date;
  points_resolved_at: Date | null;
};

const toRecord = (r: Row): ProductRecord => ({
  id: r.id,
  title: r.title,
  description: r.description,
  keywords: r.keywords,
  objects: r.objects,
  sort: r.sort,
  selection: r.selection,
  points: r.points,
  points_resolved_at: r.points_resolved_at ? toRfc3339(r.points_resolved_at) : null,
  source_id: r.source_id,
  delegation_id: r.delegation_id,
  backend: r.backend,
  content_type: r.content_type,
  profile: r.profile,
  created_at: toRfc3339(r.created_at),
});

const json = (v: unknown) => (v === null ? null : JSON.stringify(v));

const toRow = (p: Omit<ProductRecord, 'created_at'>) => ({
  id: p.id,
  title: p.title,
  description: p.description,
  keywords: json(p.keywords),
  objects: json(p.objects),
  sort: p.sort,
  selection: json(p.selection),
  points: json(p.points),
  points_resolved_at: p.points_resolved_at,
  source_id: p.source_id,
  delegation_id: p.delegation_id,
  backend: json(p.backend),
  content_type: p.content_type,
  profile: p.profile,
});

export function productStore(db: Db | Knex.Transaction) {
  return {
    async insert(p: Omit<ProductRecord, 'created_at'>): Promise<ProductRecord> {
      const [row] = (await db('products').insert(toRow(p)).returning('*')) as Row[];
      return toRecord(row!);
    },
    async replace(p: Omit<ProductRecord, 'created_at'>): Promise<ProductRecord> {
      const [row] = (await db('products')
        .where({ id: p.id })
        .update({ ...toRow(p), updated_at: db.fn.now() })
        .returning('*')) as Row[];
      return toRecord(row!);
    },
    async get(id: string): Promise<ProductRecord | undefined> {
      const row = (await db('products').where({ id }).first()) as Row | undefined;
      return row ? toRecord(row) : undefined;
    },
    async exists(id: string): Promise<boolean> {
      return (await db('products').where({ id }).first('id')) !== undefined;
    },
    list: (page: PageRequest) => pageBySeq(db('products'), page, toRecord),
    /** Products delivered from a source that use any of the given objects. */
    async usingObjects(
      sourceId: string,
      objects: string[],
    ): Promise<Array<{ id: string; objects: string[] }>> {
      if (objects.length === 0) return [];
      return (await db('products')
        .select('id', 'objects')
        .where({ source_id: sourceId })
        .andWhereRaw('objects \\?| ?::text[]', [objects])
        .orderBy('seq')) as Array<{ id: string; objects: string[] }>;
    },
  };
}
