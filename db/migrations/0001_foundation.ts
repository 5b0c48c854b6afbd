import type { Knex } from 'knex';

/**
 * Resources of the catalog side: API keys, sources, products, offers, policies, settings.
 * Every listable table has a `seq` (insertion order) that cursor paging walks.
 */
export async function up(knex: Knex): Promise<void> {
  await knex.schema.createTable('api_keys', (t) => {
    t.bigIncrements('seq');
    t.text('id').notNullable().unique();
    t.text('name').notNullable();
    t.text('role').notNullable();
    t.specificType('scopes', 'text[]').notNullable().defaultTo('{}');
    t.text('secret_hash').notNullable();
    t.timestamp('created_at', { useTz: true }).notNullable().defaultTo(knex.fn.now());
    t.timestamp('last_used_at', { useTz: true });
    t.timestamp('revoked_at', { useTz: true });
  });

  await knex.schema.createTable('sources', (t) => {
    t.bigIncrements('seq');
    t.text('id').notNullable().unique();
    t.text('name').notNullable();
    t.text('protocol').notNullable();
    t.text('health_path');
    t.jsonb('objects').notNullable();
    t.jsonb('backend');
    t.jsonb('links').notNullable();
    t.timestamp('created_at', { useTz: true }).notNullable().defaultTo(knex.fn.now());
    t.timestamp('updated_at', { useTz: true }).notNullable().defaultTo(knex.fn.now());
  });

  await knex.schema.createTable('policies', (t) => {
    t.bigIncrements('seq');
    t.text('id').notNullable().unique();
    t.text('title');
    t.text('description');
    t.jsonb('permissions').notNullable();
    t.jsonb('prohibitions').notNullable();
    t.jsonb('obligations').notNullable();
    t.timestamp('created_at', { useTz: true }).notNullable().defaultTo(knex.fn.now());
  });

  await knex.schema.createTable('products', (t) => {
    t.bigIncrements('seq');
    t.text('id').notNullable().unique();
    t.text('title').notNullable();
    t.text('description');
    t.jsonb('keywords').notNullable();
    t.jsonb('objects').notNullable();
    t.text('sort');
    t.jsonb('selection').notNullable();
    t.jsonb('points');
    t.timestamp('points_resolved_at', { useTz: true });
    t.text('source_id').references('sources.id').onUpdate('CASCADE');
    t.text('delegation_id');
    t.jsonb('backend');
    t.text('content_type').notNullable();
    t.text('profile').notNullable();
    t.timestamp('created_at', { useTz: true }).notNullable().defaultTo(knex.fn.now());
    t.timestamp('updated_at', { useTz: true }).notNullable().defaultTo(knex.fn.now());
  });
  // A source change checks which products use an object: index the objects array.
  await knex.raw('CREATE INDEX products_objects_gin ON products USING gin (objects)');

  await knex.schema.createTable('offers', (t) => {
    t.bigIncrements('seq');
    t.text('id').notNullable().unique();
    t.text('asset_id').notNullable().references('products.id');
    t.text('access_policy_id').notNullable().references('policies.id');
    t.text('contract_policy_id').notNullable().references('policies.id');
    t.text('approval').notNullable();
    t.timestamp('created_at', { useTz: true }).notNullable().defaultTo(knex.fn.now());
    t.timestamp('updated_at', { useTz: true }).notNullable().defaultTo(knex.fn.now());
  });

  await knex.schema.createTable('settings', (t) => {
    t.text('key').primary();
    t.jsonb('value').notNullable();
    t.timestamp('updated_at', { useTz: true }).notNullable().defaultTo(knex.fn.now());
  });
}

export async function down(knex: Knex): Promise<void> {
  for (const table of ['offers', 'products', 'policies', 'sources', 'api_keys', 'settings']) {
    await knex.schema.dropTableIfExists(table);
  }
}
