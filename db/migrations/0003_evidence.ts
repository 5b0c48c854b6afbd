import type { Knex } from 'knex';

/**
 * The hash-chained evidence log (spec "Evidence"; docs/evidence.md). One linear chain per
 * connector: entry `seq` (1, 2, 3… without gaps) stores the exact RFC 8785 bytes that were hashed
 * (`canonical`, which itself contains seq and prev_hash) and `hash` = SHA-256 of those bytes.
 *
 * Appends are serialized by the primary key, not by a lock held across the transaction: a writer
 * inserts entry n+1 carrying the hash of entry n, only if entry n is there with that hash
 * (db/evidence.ts). Two writers racing for the same n+1 cannot both commit (the second waits on
 * the unique index and fails), so the chain cannot fork, and an append is one statement in one
 * short transaction. Measured against a `SELECT … FOR UPDATE` head row in bench/evidence.ts.
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
