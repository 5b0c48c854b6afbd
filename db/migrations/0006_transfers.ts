import type { Knex } from 'knex';

/**
 * Transfers (read model written only by activities, newest version wins) and their history;
 * connections (the consumer's named subscriptions) and the applications allowed on them; how
 * an agreement ended.
 */
export async function up(knex: Knex): Promise<void> {
  await knex.schema.createTable('transfers', (t) => {
    t.bigIncrements('seq');
    // Our own process id: the providerPid when we are the provider, the consumerPid otherwise.
    t.text('id').notNullable().unique();
    t.text('workflow_id').notNullable();
    t.text('role').notNullable();
    t.text('state').notNullable();
    t.text('consumer_pid').notNullable();
    t.text('provider_pid');
    t.text('agreement_id').notNullable();
    t.text('counterparty_did').notNullable();
    t.text('counterparty_address');
    t.text('dataset_id');
    t.text('format').notNullable();
    t.text('connection_alias');
    t.text('error');
    // Consumer: the address with its token (the gateway uses it); masked in every management read.
    // Provider: the address we sent, token masked (the data plane keeps only token hashes).
    t.jsonb('data_address');
    t.text('dataplane_id');
    t.text('dataplane_endpoint');
    t.text('delegation_id');
    t.text('flow_state');
    t.integer('version').notNullable();
    t.timestamp('created_at', { useTz: true }).notNullable().defaultTo(knex.fn.now());
    t.timestamp('updated_at', { useTz: true }).notNullable().defaultTo(knex.fn.now());
    t.index(['role', 'state']);
    t.index(['agreement_id']);
  });
  // A provider finds a transfer again by the consumer's pid when the same request arrives twice.
  await knex.raw(
    'CREATE UNIQUE INDEX transfers_consumer ON transfers (role, counterparty_did, consumer_pid)',
  );

  await knex.schema.createTable('transfer_history', (t) => {
    t.bigIncrements('seq');
    t.text('transfer_id').notNullable().references('transfers.id');
    // The workflow's version of this entry: a retried activity writes it once.
    t.integer('version').notNullable();
    t.timestamp('at', { useTz: true }).notNullable();
    t.text('state').notNullable();
    t.text('message_type');
    t.text('direction');
    t.text('evidence_id');
    t.text('note');
    t.unique(['transfer_id', 'version']);
  });

  await knex.schema.createTable('connections', (t) => {
    t.bigIncrements('seq');
    t.text('alias').notNullable().unique();
    // The negotiation that last named this alias, its agreement, and the transfer the gateway uses.
    t.text('negotiation_id');
    t.text('agreement_id');
    t.text('transfer_id');
    t.text('provider_did');
    t.timestamp('created_at', { useTz: true }).notNullable().defaultTo(knex.fn.now());
    t.timestamp('updated_at', { useTz: true }).notNullable().defaultTo(knex.fn.now());
  });

  await knex.schema.createTable('connection_apps', (t) => {
    t.text('alias').notNullable().references('connections.alias').onDelete('CASCADE');
    t.text('api_key_id').notNullable();
    t.text('access').notNullable();
    t.timestamp('created_at', { useTz: true }).notNullable().defaultTo(knex.fn.now());
    t.timestamp('updated_at', { useTz: true }).notNullable().defaultTo(knex.fn.now());
    t.primary(['alias', 'api_key_id']);
  });
  await knex.raw(
    "ALTER TABLE connection_apps ADD CONSTRAINT connection_apps_access CHECK (access IN ('read', 'read_write'))",
  );

  // "A negotiation started with a connection alias creates or updates the connection": the
  // consumer's first write of such a negotiation names it here, in the same transaction, so the
  // alias is known (not active yet) from the moment the negotiation exists. The transfer started
  // when it is FINALIZED points the connection at itself (db/connections.ts).
  await knex.raw(`
    CREATE FUNCTION connection_from_negotiation() RETURNS trigger AS $$
    BEGIN
      INSERT INTO connections (alias, negotiation_id, provider_did)
        VALUES (NEW.connection_alias, NEW.id, NEW.counterparty_did)
        ON CONFLICT (alias) DO UPDATE
          SET negotiation_id = EXCLUDED.negotiation_id, updated_at = now();
      RETURN NULL;
    END $$ LANGUAGE plpgsql`);
  await knex.raw(`
    CREATE TRIGGER negotiations_name_connection AFTER INSERT ON negotiations
      FOR EACH ROW WHEN (NEW.role = 'consumer' AND NEW.connection_alias IS NOT NULL)
      EXECUTE FUNCTION connection_from_negotiation()`);

  // How an agreement ended (state 'ended'): when, by which party, why.
  await knex.schema.alterTable('agreements', (t) => {
    t.timestamp('ended_at', { useTz: true });
    t.text('ended_by');
    t.text('end_reason');
  });
}

export async function down(knex: Knex): Promise<void> {
  await knex.schema.alterTable('agreements', (t) => {
    t.dropColumn('end_reason');
    t.dropColumn('ended_by');
    t.dropColumn('ended_at');
  });
  await knex.raw('DROP TRIGGER IF EXISTS negotiations_name_connection ON negotiations');
  await knex.raw('DROP FUNCTION IF EXISTS connection_from_negotiation()');
  await knex.schema.dropTableIfExists('connection_apps');
  await knex.schema.dropTableIfExists('connections');
  await knex.schema.dropTableIfExists('transfer_history');
  await knex.schema.dropTableIfExists('transfers');
}
