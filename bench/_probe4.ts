import pg from 'pg';
import { startEmbeddedPostgres, defaultTestDataDir } from '../dev/postgres.js';
import { createDb, ensureDatabase, migrateLatest } from '../db/knex.js';
import { evidenceStore, sha256Hex, envelopeHead, envelopeTail } from '../db/evidence.js';
const server = await startEmbeddedPostgres({ dataDir: defaultTestDataDir(), ephemeral: true });
try {
  await ensureDatabase(server.adminUrl, 'p');
  const db = createDb(server.urlFor('p'));
  await migrateLatest(db);
  const s = evidenceStore(db);
  let i = 0; const N = 100000;
  await Promise.all(Array.from({ length: 64 }, async () => { while (i < N) { const n = i++; await s.append({ kind: 'dsp.inbound', process_id: `neg-${n % 1000}`, payload: { '@context': ['https://w3id.org/dspace/2025/1/context.jsonld'], '@type': 'ContractRequestMessage', consumerPid: `urn:uuid:${crypto.randomUUID()}`, callbackAddress: 'https://consumer.example/dsp/callback', offer: { '@id': `urn:offer:${n}`, target: 'urn:dataset:building-0363010000123456', permission: [{ action: 'use', constraint: [{ leftOperand: 'pl:membership', operator: 'eq' }] }] } } }); } }));
  await db.raw('VACUUM ANALYZE evidence');
  const c = new pg.Client({ connectionString: server.urlFor('p') }); await c.connect();
  async function time(name: string, sql: string, per: (r: any[]) => boolean) {
    const t = performance.now(); let n = 0; let bad = 0;
    const read = (after: number) => c.query({ name, text: sql, values: [after, 5000], rowMode: 'array' });
    let next = read(0);
    for (;;) {
      const r = await next; if (!r.rows.length) break;
      const last = r.rows.at(-1) as any[];
      next = read(last[0]);
      for (const row of r.rows) { if (!per(row)) bad++; }
      n += r.rows.length;
    }
    console.log(name.padEnd(20), Math.round(n / ((performance.now() - t) / 1000)), 'bad', bad);
  }
  const AT = `to_char(at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')`;
  for (let k = 0; k < 3; k++) {
    await time('v1 bytea+Date' + k, `select seq, prev_hash, hash, canonical, id, kind, process_id, at from evidence where seq > $1 order by seq limit $2`, (r) => {
      const c: Buffer = r[3]; const head = Buffer.from(envelopeHead({ at: r[7].toISOString(), id: r[4], kind: r[5] })); const tail = Buffer.from(envelopeTail({ prev_hash: r[1], process_id: r[6], seq: r[0] }));
      return sha256Hex(c) === r[2] && c.compare(head, 0, head.length, 0, head.length) === 0 && c.compare(tail, 0, tail.length, c.length - tail.length) === 0; });
    await time('v2 text' + k, `select seq, prev_hash, hash, convert_from(canonical, 'UTF8'), id, kind, process_id, ${AT} from evidence where seq > $1 order by seq limit $2`, (r) => {
      const c: string = r[3];
      return (require_hash(c) === r[2]) && c.startsWith(envelopeHead({ at: r[7], id: r[4], kind: r[5] })) && c.endsWith(envelopeTail({ prev_hash: r[1], process_id: r[6], seq: r[0] })); });
    await time('v3 server' + k, `select seq, prev_hash, hash, pg_catalog.sha256(canonical) = decode(hash, 'hex') and position(convert_to('{"at":"' || ${AT} || '","id":' || to_json(id)::text || ',"kind":' || to_json(kind)::text || ',"payload":', 'UTF8') in canonical) = 1 and substr(canonical, octet_length(canonical) - octet_length(convert_to(',"prev_hash":"' || prev_hash || '","process_id":' || coalesce(to_json(process_id)::text, 'null') || ',"seq":' || seq || '}', 'UTF8')) + 1) = convert_to(',"prev_hash":"' || prev_hash || '","process_id":' || coalesce(to_json(process_id)::text, 'null') || ',"seq":' || seq || '}', 'UTF8') from evidence where seq > $1 order by seq limit $2`, (r) => r[3] === true);
    await time('v4 server hash only' + k, `select seq, prev_hash, hash, pg_catalog.sha256(canonical) = decode(hash, 'hex') from evidence where seq > $1 order by seq limit $2`, (r) => r[3] === true);
  }
  await c.end(); await db.destroy();
} finally { await server.stop(); }
function require_hash(s: string) { return sha256Hex(s as any); }
