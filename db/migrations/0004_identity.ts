import type { Knex } from 'knex';

/**
 * The connector's signing keys (private halves encrypted at rest, auth/keys.ts) and the ids of
 * connector tokens already accepted, so that a token cannot be replayed (security.md §2.2 step 6).
 */
export async function up(knex: Knex): Promise<void> {
  await knex.schema.createTable('connector_keys', (t) => {
    // The RFC 7638 thumbprint of the public key; the DID document names the key `<did>#<kid>`.
    t.text('kid').primary();
    t.text('alg').notNullable();
    t.jsonb('public_jwk').notNullable();
    // A compact JWE (dir + A256GCM) of the private JWK under the key-encryption key.
    t.text('private_key_encrypted').notNullable();
    t.timestamp('created_at', { useTz: true }).notNullable().defaultTo(knex.fn.now());
    t.boolean('active').notNullable().defaultTo(true);
  });

  await knex.schema.createTable('seen_jtis', (t) => {
    t.text('iss').notNullable();
    t.text('jti').notNullable();
    // Kept until the token could no longer be accepted anyway (its exp plus the clock skew).
    t.timestamp('exp', { useTz: true }).notNullable().index();
    t.primary(['iss', 'jti']);
  });
}

export async function down(knex: Knex): Promise<void> {
  await knex.schema.dropTableIfExists('seen_jtis');
  await knex.schema.dropTableIfExists('connector_keys');
}
