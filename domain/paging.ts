/**
 * Cursor paging for every list: items in a stable order (insertion order, by an internal
 * sequence), `next_cursor` null on the last page. Cursors are opaque to callers.
 */
export const DEFAULT_PAGE_SIZE = 50;
export const MAX_PAGE_SIZE = 200;

export interface Page<T> {
  items: T[];
  next_cursor: string | null;
}

const PREFIX = 'c1.';

export function encodeCursor(seq: number | string): string {
  return PREFIX + Buffer.from(String(seq), 'utf8').toString('base64url');
}

/** The sequence a cursor points after, or null when the cursor is not one of ours. */
export function decodeCursor(cursor: string): number | null {
  if (!cursor.startsWith(PREFIX)) return null;
  const raw = Buffer.from(cursor.slice(PREFIX.length), 'base64url').toString('utf8');
  if (!/^\d{1,18}$/.test(raw)) return null;
  if (encodeCursor(raw) !== cursor) return null;
  return Number(raw);
}
