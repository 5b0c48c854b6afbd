import type { Knex } from 'knex';

/**
 * The provider data plane and the gateway: API key scopes (a gateway key cannot manage, a
 * management key cannot read buildings), transfer access tokens, and the lease that decides
 * which data plane instance is active.
 */
export async function up(knex: Knex): Promise<void> {
  await knex.schema.alterTable('api_keys', (t) => {
    t.text('scope').notNullable().defaultTo('management');
  });
  await knex.raw(
    "ALTER TABLE api_keys ADD CONSTRAINT api_keys_scope CHECK (scope IN ('management', 'gateway'))",
  );

  // Bearer tokens of pull transfers (gateway/dataplane/access.ts). Only a SHA-256 of the token
  // is stored. A refreshed token names its predecessor, which stays valid until the new token is
  // first used, so a refresh answer lost on the way never breaks a transfer.
  await knex.schema.createTable('dataplane_tokens', (t) => {
    t.bigIncrements('seq');
    t.text('id').notNullable().unique();
    t.text('transfer_id').notNullable();
    t.text('agreement_id').notNullable();
    t.text('consumer_did').notNullable();
    t.text('token_hash').notNullable().unique();
    // Set on tokens the transfer process issues (start, resume): a retried issue replaces its token.
    t.text('issue_key').unique();
    t.text('predecessor_id');
    t.text('endpoint').notNullable();
    t.integer('ttl_seconds').notNullable();
    t.timestamp('issued_at', { useTz: true }).notNullable().defaultTo(knex.fn.now());
    t.timestamp('expires_at', { useTz: true }).notNullable();
    t.timestamp('used_at', { useTz: true });
    t.timestamp('revoked_at', { useTz: true });
    t.index(['transfer_id']);
    t.index(['predecessor_id']);
  });

  // One row per data plane role: the instance holding an unexpired lease serves, the others
  // answer `standby` until the lease runs out and one of them takes it.
  await knex.schema.createTable('dataplane_leases', (t) => {
    t.text('name').primary();
    t.text('holder').notNullable();
    t.timestamp('expires_at', { useTz: true }).notNullable();
    t.timestamp('acquired_at', { useTz: true }).notNullable().defaultTo(knex.fn.now());
  });
}

export async function down(knex: Knex): Promise<void> {
  await knex.schema.dropTableIfExists('dataplane_leases');
  await knex.schema.dropTableIfExists('dataplane_tokens');
  await knex.raw('ALTER TABLE api_keys DROP CONSTRAINT IF EXISTS api_keys_scope');
  await knex.schema.alterTable('api_keys', (t) => {
    t.dropColumn('scope');
  });
}
