import type { Db } from './knex.js';

/** Small key/value settings of the connector (e.g. the request log; first-start facts). */
export function settingsStore(db: Db) {
  return {
    async get<T>(key: string): Promise<T | undefined> {
      const row: { value: T } | undefined = await db('settings').where({ key }).first('value');
      return row?.value;
    },
    async put<T>(key: string, value: T): Promise<void> {
      await db('settings')
        .insert({ key, value: JSON.stringify(value), updated_at: db.fn.now() })
        .onConflict('key')
        .merge();
    },
  };
}
