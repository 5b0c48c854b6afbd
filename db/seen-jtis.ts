import type { Db } from './knex.js';

/** How often, at most, expired ids are deleted (they are harmless meanwhile: see `remember`). */
const PRUNE_EVERY_MS = 60_000;

/** The ids of connector tokens already accepted, per issuer, until the tokens expire. */
export function seenJtiStore(db: Db) {
  let lastPrune = 0;

  async function pruneNowAndThen(): Promise<void> {
    if (Date.now() - lastPrune < PRUNE_EVERY_MS) return;
    lastPrune = Date.now();
    await db('seen_jtis').where('exp', '<', db.fn.now()).delete();
  }

  return {
    /**
     * Records `jti` of `iss`; false when it was seen already and has not expired. One statement,
     * so two requests with the same token cannot both pass. An expired row left behind does not
     * count: a token that old fails its own `exp` check first.
     */
    async remember(iss: string, jti: string, exp: Date): Promise<boolean> {
      const rows = (await db('seen_jtis')
        .insert({ iss, jti, exp })
        .onConflict(['iss', 'jti'])
        .merge({ exp })
        .where('seen_jtis.exp', '<', db.fn.now())
        .returning('jti')) as unknown[];
      await pruneNowAndThen().catch(() => undefined);
      return rows.length === 1;
    },
  };
}
export type SeenJtiStore = ReturnType<typeof seenJtiStore>;
