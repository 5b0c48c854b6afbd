import type { Knex } from 'knex';

/**
 * The hash-chained evidence log (spec "Evidence"; docs/evidence.md). One linear chain per
 * connector: entry `seq` (1, 2, 3… without gaps) keeps the exact RFC 8785 bytes that were hashed
 * (`canonical`, which itself contains seq and prev_hash) and `hash` = SHA-256 of those bytes.
 *
 * No head table: the tail is the last row of the primary key. Appends are serialized by a
 * transaction-level advisory lock taken inside the one INSERT that appends (db/evidence.ts), and
 * that INSERT only goes in after the entry it names as its predecessor; the primary key refuses
 * a second writer of the same seq. So the chain cannot fork or have a gap, and an append is one
 * statement in one short transaction (bench/evidence.ts measures it against a head row locked
 * with SELECT … FOR UPDATE).
 */
export async function up(knex: Knex): Promise<void> {
  await knex.schema.createTable('evidence', (t) => {
    t.bigInteger('seq').primary();
    // The evidence_id other tables reference (outbox rows, negotiation history).
    t.text('id').notNullable().unique();
    t.text('kind').notNullable();
    t.text('process_id');
    t.timestamp('at', { useTz: true }).notNullable();
    t.text('prev_hash').notNullable();
    t.text('hash').notNullable();
    // bytea, not text or jsonb: the bytes that were hashed, whatever the database's encoding.
    t.binary('canonical').notNullable();
    t.index(['process_id', 'seq'], 'evidence_process_id_seq');
  });
  await knex.raw(`
    ALTER TABLE evidence
      ADD CONSTRAINT evidence_seq_positive CHECK (seq > 0),
      ADD CONSTRAINT evidence_prev_hash_hex CHECK (prev_hash ~ '^[0-9a-f]{64}$'),
      ADD CONSTRAINT evidence_hash_hex CHECK (hash ~ '^[0-9a-f]{64}$')
  `);
  // Statement-level, so that even an UPDATE or DELETE matching no row is refused, and TRUNCATE too.
  // This is defence in depth against mistakes: a superuser can disable it; anchors are what
  // make history independently checkable (spec "Chain verification": last_anchor).
  await knex.raw(`
    CREATE FUNCTION evidence_refuse_change() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      RAISE EXCEPTION 'evidence is append-only: % is not allowed on %', TG_OP, TG_TABLE_NAME
        USING ERRCODE = 'object_not_in_prerequisite_state',
              HINT = 'entries are only ever appended (db/evidence.ts); corrections are new entries';
    END
    $$
  `);
  await knex.raw(`
    CREATE TRIGGER evidence_append_only BEFORE UPDATE OR DELETE OR TRUNCATE ON evidence
      FOR EACH STATEMENT EXECUTE FUNCTION evidence_refuse_change()
  `);
}

export async function down(knex: Knex): Promise<void> {
  await knex.schema.dropTableIfExists('evidence');
  await knex.raw('DROP FUNCTION IF EXISTS evidence_refuse_change()');
}
