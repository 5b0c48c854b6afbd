import { startEmbeddedPostgres, defaultTestDataDir } from '../dev/postgres.js';
import { createDb, ensureDatabase, migrateLatest } from '../db/knex.js';
import { evidenceStore } from '../db/evidence.js';
import pg from 'pg';
const server = await startEmbeddedPostgres({ dataDir: defaultTestDataDir(), ephemeral: true });
const payload = (n: number) => ({ '@context': ['https://w3id.org/dspace/2025/1/context.jsonld'], '@type': 'ContractRequestMessage', consumerPid: `urn:uuid:${crypto.randomUUID()}`, callbackAddress: 'https://consumer.example/dsp/callback', offer: { '@id': `urn:offer:${n}`, target: 'urn:dataset:building-0363010000123456', permission: [{ action: 'use', constraint: [{ leftOperand: 'pl:membership', operator: 'eq' }] }] } });
try {
  await ensureDatabase(server.adminUrl, 'p');
  const db = createDb(server.urlFor('p'));
  await migrateLatest(db);
  const s = evidenceStore(db);
  const rate = async (name: string, n: number, f: (i: number) => Promise<unknown>) => { const t = performance.now(); for (let i = 0; i < n; i++) await f(i); console.log(name.padEnd(30), Math.round(n / ((performance.now() - t) / 1000))); };
  await rate('store append', 3000, (i) => s.append({ kind: 'dsp.inbound', process_id: 'x', payload: payload(i) }));
  await rate('knex select 1', 3000, () => db.raw('select 1'));
  const c = new pg.Client({ connectionString: server.urlFor('p') }); await c.connect();
  await rate('pg select 1', 3000, () => c.query('select 1'));
  await rate('pg select $1', 3000, () => c.query('select $1::int', [1]));
  await c.query('create table t (seq bigserial primary key, id text unique, canonical bytea)');
  await rate('pg insert', 3000, (i) => c.query('insert into t (id, canonical) values ($1, $2)', [`id${i}`, Buffer.from(JSON.stringify(payload(i)))]));
  await rate('store append again', 3000, (i) => s.append({ kind: 'dsp.inbound', process_id: 'x', payload: payload(i) }));
  await c.end(); await db.destroy();
} finally { await server.stop(); }
