import pg from 'pg';
import { startEmbeddedPostgres, defaultTestDataDir } from '../dev/postgres.js';
import { createDb, ensureDatabase, migrateLatest } from '../db/knex.js';
import { evidenceStore, sha256Hex } from '../db/evidence.js';
const server = await startEmbeddedPostgres({ dataDir: defaultTestDataDir(), ephemeral: true });
try {
  await ensureDatabase(server.adminUrl, 'p');
  const db = createDb(server.urlFor('p'));
  await migrateLatest(db);
  const s = evidenceStore(db);
  let i = 0; const t0 = performance.now();
  await Promise.all(Array.from({ length: 64 }, async () => { while (i < 100000) { const n = i++; await s.append({ kind: 'dsp.inbound', process_id: `neg-${n % 1000}`, payload: { '@context': ['https://w3id.org/dspace/2025/1/context.jsonld'], '@type': 'ContractRequestMessage', consumerPid: `urn:uuid:${crypto.randomUUID()}`, callbackAddress: 'https://consumer.example/dsp/callback', offer: { '@id': `urn:offer:${n}`, target: 'urn:dataset:building-0363010000123456', permission: [{ action: 'use', constraint: [{ leftOperand: 'pl:membership', operator: 'eq' }] }] } } }); } }));
  console.log('fill/s', 100000 / ((performance.now() - t0) / 1000));
  await db.raw('VACUUM ANALYZE evidence');
  const c = new pg.Client({ connectionString: server.urlFor('p') }); await c.connect();
  async function time(name: string, sql: string, opts: { array?: boolean; per?: (r: any) => void } = {}) {
    let after = 0, n = 0; const t = performance.now();
    for (;;) {
      const r = await c.query({ text: sql, values: [after, 5000], ...(opts.array ? { rowMode: 'array' } : {}) });
      if (!r.rows.length) break;
      if (opts.per) for (const row of r.rows) opts.per(row);
      n += r.rows.length; after = opts.array ? (r.rows.at(-1) as any)[0] : (r.rows.at(-1) as any).seq;
    }
    console.log(name.padEnd(40), Math.round(n / ((performance.now() - t) / 1000)));
  }
  const cols = 'seq, id, kind, process_id, at, prev_hash, hash, canonical';
  for (let k = 0; k < 2; k++) {
  await time('all cols objects', `select ${cols} from evidence where seq > $1 order by seq limit $2`);
  await time('all cols array', `select ${cols} from evidence where seq > $1 order by seq limit $2`, { array: true });
  await time('no canonical', `select seq, id, kind, process_id, at, prev_hash, hash from evidence where seq > $1 order by seq limit $2`, { array: true });
  await time('no at', `select seq, id, kind, process_id, prev_hash, hash, canonical from evidence where seq > $1 order by seq limit $2`, { array: true });
  await time('canonical text', `select seq, id, kind, process_id, at, prev_hash, hash, convert_from(canonical,'UTF8') from evidence where seq > $1 order by seq limit $2`, { array: true });
  await time('seq+canonical only', `select seq, canonical from evidence where seq > $1 order by seq limit $2`, { array: true });
  await time('seq+canonical text only', `select seq, convert_from(canonical,'UTF8') from evidence where seq > $1 order by seq limit $2`, { array: true });
  await time('seq+canonical text + hash', `select seq, convert_from(canonical,'UTF8'), hash from evidence where seq > $1 order by seq limit $2`, { array: true, per: (r) => { if (sha256Hex(r[1]) === r[2]) return; } });
  await time('seq+canonical bytea + hash', `select seq, canonical, hash from evidence where seq > $1 order by seq limit $2`, { array: true, per: (r) => { if (sha256Hex(r[1]) === r[2]) return; } });
  await time('server-side sha256 only', `select seq, encode(sha256(canonical),'hex') = hash from evidence where seq > $1 order by seq limit $2`, { array: true });
  }
  await c.end(); await db.destroy();
} finally { await server.stop(); }
