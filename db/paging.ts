import type { Knex } from 'knex';
import { encodeCursor, type Page } from '../domain/paging.js';

export interface PageRequest {
  limit: number;
  /** The sequence the previous page ended at (decoded cursor), or null for the first page. */
  after: number | null;
}

/** Walks a table in insertion order: one row more than asked tells whether a next page exists. */
export async function pageBySeq<Row extends { seq: number }, Item>(
  query: Knex.QueryBuilder,
  page: PageRequest,
  toItem: (row: Row) => Item,
): Promise<Page<Item>> {
  if (page.after !== null) void query.where('seq', '>', page.after);
  const rows = (await query.orderBy('seq', 'asc').limit(page.limit + 1)) as Row[];
  const more = rows.length > page.limit;
  const items = rows.slice(0, page.limit);
  const last = items.at(-1);
  return { items: items.map(toItem), next_cursor: more && last ? encodeCursor(last.seq) : null };
}

/** PostgreSQL's unique_violation. */
export const isUniqueViolation = (err: unknown): boolean => (err as { code?: string }).code === '23505';
