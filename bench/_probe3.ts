import { startEmbeddedPostgres, defaultTestDataDir } from '../dev/postgres.js';
import { createDb, ensureDatabase, migrateLatest } from '../db/knex.js';
import { envelopeHead, envelopeTail, sha256Hex, GENESIS_HASH } from '../db/evidence.js';
import pg from 'pg';
const server = await startEmbeddedPostgres({ dataDir: defaultTestDataDir(), ephemeral: true });
const payload = (n: number) => ({ '@context': ['https://w3id.org/dspace/2025/1/context.jsonld'], '@type': 'ContractRequestMessage', consumerPid: `urn:uuid:${crypto.randomUUID()}`, callbackAddress: 'https://consumer.example/dsp/callback', offer: { '@id': `urn:offer:${n}`, target: 'urn:dataset:building-0363010000123456', permission: [{ action: 'use', constraint: [{ leftOperand: 'pl:membership', operator: 'eq' }] }] } });
try {
  await ensureDatabase(server.adminUrl, 'p');
  const db = createDb(server.urlFor('p'));
  await migrateLatest(db);
  const c = new pg.Client({ connectionString: server.urlFor('p') }); await c.connect();
  const rate = async (name: string, n: number, f: (i: number) => Promise<unknown>) => { const t = performance.now(); for (let i = 0; i < n; i++) await f(i); console.log(name.padEnd(30), Math.round(n / ((performance.now() - t) / 1000))); };
  let tail = { seq: 0, hash: GENESIS_HASH };
  const row = (i: number) => { const seq = tail.seq + 1; const at = new Date().toISOString(); const id = `ev_${crypto.randomUUID()}`; const canonical = Buffer.from(envelopeHead({ at, id, kind: 'k.x' }) + JSON.stringify(payload(i)) + envelopeTail({ prev_hash: tail.hash, process_id: 'p', seq })); return { seq, id, kind: 'k.x', process_id: 'p', at, prev_hash: tail.hash, hash: sha256Hex(canonical), canonical }; };
  const unnestSql = `INSERT INTO evidence (seq, id, kind, process_id, at, prev_hash, hash, canonical)
     SELECT * FROM unnest($1::bigint[], $2::text[], $3::text[], $4::text[], $5::timestamptz[], $6::text[], $7::text[], $8::bytea[])
     WHERE $9::bigint = 0 OR EXISTS (SELECT 1 FROM evidence WHERE seq = $9 AND hash = $10)`;
  const valuesSql = `INSERT INTO evidence (seq, id, kind, process_id, at, prev_hash, hash, canonical)
     SELECT $1, $2, $3, $4, $5, $6, $7, $8
     WHERE $9::bigint = 0 OR EXISTS (SELECT 1 FROM evidence WHERE seq = $9 AND hash = $10)`;
  const plainSql = `INSERT INTO evidence (seq, id, kind, process_id, at, prev_hash, hash, canonical) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`;
  const go = (sql: string, arr: boolean, name?: string, cond = true) => async (i: number) => { const r = row(i); const v = arr ? [[r.seq], [r.id], [r.kind], [r.process_id], [r.at], [r.prev_hash], [r.hash], [r.canonical]] : [r.seq, r.id, r.kind, r.process_id, r.at, r.prev_hash, r.hash, r.canonical]; const res = await c.query({ text: sql, values: cond ? [...v, tail.seq, tail.hash] : v, ...(name ? { name } : {}) }); if (res.rowCount !== 1) throw new Error('x'); tail = r; };
  await rate('unnest', 3000, go(unnestSql, true));
  await rate('unnest prepared', 3000, go(unnestSql, true, 'u'));
  await rate('values-select', 3000, go(valuesSql, false));
  await rate('values-select prepared', 3000, go(valuesSql, false, 'v'));
  await rate('plain values', 3000, go(plainSql, false, undefined, false));
  await rate('plain values prepared', 3000, go(plainSql, false, 'pv', false));
  await c.query('ALTER TABLE evidence DROP CONSTRAINT evidence_hash_hex, DROP CONSTRAINT evidence_prev_hash_hex');
  await rate('unnest prepared no checks', 3000, go(unnestSql, true, 'u2'));
  await c.query('DROP TRIGGER evidence_append_only ON evidence');
  await rate('unnest prepared no trigger', 3000, go(unnestSql, true, 'u3'));
  await c.end(); await db.destroy();
} finally { await server.stop(); }
