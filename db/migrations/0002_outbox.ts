import type { Knex } from 'knex';

/** Outbound messages to counterparties, kept until delivered or dropped (spec "Outbox row"). */
export async function up(knex: Knex): Promise<void> {
  await knex.schema.createTable('outbox', (t) => {
    t.bigIncrements('id');
    t.text('process_id').notNullable();
    t.text('kind').notNullable();
    t.text('message_type').notNullable();
    t.text('counterparty_did').notNullable();
    t.text('url').notNullable();
    t.jsonb('body').notNullable();
    // The evidence entry of the message; the evidence chain fills it once it exists.
    t.text('evidence_id');
    t.text('status').notNullable().defaultTo('pending');
    t.integer('attempts').notNullable().defaultTo(0);
    t.timestamp('next_attempt_at', { useTz: true }).notNullable().defaultTo(knex.fn.now());
    t.text('last_error');
    t.integer('response_status');
    t.timestamp('created_at', { useTz: true }).notNullable().defaultTo(knex.fn.now());
    t.timestamp('resent_at', { useTz: true });
    t.timestamp('delivered_at', { useTz: true });
    t.index(['process_id', 'status']);
  });
}

export async function down(knex: Knex): Promise<void> {
  await knex.schema.dropTableIfExists('outbox');
}
