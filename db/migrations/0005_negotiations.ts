import type { Knex } from 'knex';

/**
 * The read model of negotiations (written only by activities, newest version wins), their
 * history, and the agreements they produce.
 */
export async function up(knex: Knex): Promise<void> {
  await knex.schema.createTable('negotiations', (t) => {
    t.bigIncrements('seq');
    // Our own process id: the providerPid when we are the provider, the consumerPid otherwise.
    t.text('id').notNullable().unique();
    t.text('workflow_id').notNullable();
    t.text('role').notNullable();
    t.text('state').notNullable();
    t.text('consumer_pid').notNullable();
    t.text('provider_pid');
    t.text('counterparty_did').notNullable();
    t.text('counterparty_address');
    t.text('dataset_id');
    t.text('offer_id');
    t.text('agreement_id');
    t.text('purpose');
    t.jsonb('offer').notNullable();
    t.text('connection_alias');
    t.text('error');
    t.text('approval');
    t.timestamp('expires_at', { useTz: true });
    t.text('decided_by');
    t.timestamp('decided_at', { useTz: true });
    t.jsonb('narrowing');
    t.integer('version').notNullable();
    t.timestamp('created_at', { useTz: true }).notNullable().defaultTo(knex.fn.now());
    t.timestamp('updated_at', { useTz: true }).notNullable().defaultTo(knex.fn.now());
    t.index(['role', 'state']);
    t.index(['provider_pid']);
  });
  // A provider is found again by the consumer's pid when the same request arrives twice.
  await knex.raw(
    'CREATE UNIQUE INDEX negotiations_consumer ON negotiations (role, counterparty_did, consumer_pid)',
  );

  await knex.schema.createTable('negotiation_history', (t) => {
    t.bigIncrements('seq');
    t.text('negotiation_id').notNullable().references('negotiations.id');
    // The workflow's version of this entry: a retried activity writes it once.
    t.integer('version').notNullable();
    t.timestamp('at', { useTz: true }).notNullable();
    t.text('state').notNullable();
    t.text('message_type');
    t.text('direction');
    t.text('evidence_id');
    t.text('note');
    t.unique(['negotiation_id', 'version']);
  });

  await knex.schema.createTable('agreements', (t) => {
    t.bigIncrements('seq');
    t.text('id').notNullable().unique();
    t.text('negotiation_id').notNullable();
    t.text('role').notNullable();
    t.text('provider_did').notNullable();
    t.text('consumer_did').notNullable();
    t.text('dataset_id').notNullable();
    t.text('offer_id');
    t.jsonb('agreement').notNullable();
    t.jsonb('narrowing');
    t.text('connection_alias');
    t.text('state').notNullable().defaultTo('active');
    t.timestamp('signed_at', { useTz: true }).notNullable();
    t.timestamp('created_at', { useTz: true }).notNullable().defaultTo(knex.fn.now());
  });
}

export async function down(knex: Knex): Promise<void> {
  await knex.schema.dropTableIfExists('agreements');
  await knex.schema.dropTableIfExists('negotiation_history');
  await knex.schema.dropTableIfExists('negotiations');
}
