import type { Knex } from 'knex';

/**
 * The counterparty's answer to a delivered message (small JSON only), so that a delivery
 * activity run again after the row was delivered returns what the first run got (a 201's
 * providerPid, say) instead of nothing.
 */
export async function up(knex: Knex): Promise<void> {
  await knex.schema.alterTable('outbox', (t) => {
    t.jsonb('response_body');
  });
}

export async function down(knex: Knex): Promise<void> {
  await knex.schema.alterTable('outbox', (t) => {
    t.dropColumn('response_body');
  });
}
