/**
 * The hash-chained evidence log through real PostgreSQL (one database per case, so tampering in
 * one cannot leak into another) and, for the verify endpoint, a real connector over HTTP.
 */
import { expect } from 'chai';
import { MockActivityEnvironment } from '@temporalio/testing';
import { ApplicationFailure, type Logger } from '@temporalio/common';
import canonicalizeModule from 'canonicalize';
import pg from 'pg';
import { createDb, migrateLatest, type Db } from '../db/knex.js';
import {
  EvidenceConflictError,
  EvidenceInputError,
  GENESIS_HASH,
  VERIFY_PAGE_SIZE,
  envelopeHead,
  envelopeTail,
  evidenceStore,
  sha256Hex,
  type AppendedEvidence,
  type ChainVerification,
  type NewEvidence,
  VerificationFailed,
} from '../db/evidence.js';
import { createEvidenceActivities } from '../activities/evidence.js';
import { createTestDatabase, startTestConnector, type TestConnector } from './support/stack.js';
import { client } from './support/http.js';
import { expectError } from './support/expect-error.js';

const canonicalize = canonicalizeModule as unknown as (value: unknown) => string;

interface RawRow {
  seq: number;
  id: string;
  kind: string;
  process_id: string | null;
  at: Date;
  prev_hash: string;
  hash: string;
  canonical: Buffer;
}

const EMPTY_CHAIN: ChainVerification = {
  ok: true,
  entries: 0,
  head: null,
  head_seq: null,
  first_broken_seq: null,
  last_anchor: null,
};

const opened: Db[] = [];
after(() => Promise.all(opened.map((db) => db.destroy())));

async function freshDatabase(): Promise<{ db: Db; url: string }> {
  const url = await createTestDatabase('evidence');
  const db = createDb(url);
  opened.push(db);
  await migrateLatest(db);
  return { db, url };
}

function openAgain(url: string, poolMax = 2): Db {
  const db = createDb(url, { poolMax });
  opened.push(db);
  return db;
}

const entry = (n: number, processId: string | null = 'neg-1') => ({
  kind: 'dsp.inbound',
  process_id: processId,
  payload: { '@type': 'ContractRequestMessage', n },
});

/** A database holding a chain of `n` entries (payload n = 1…n). */
async function chainOf(n: number) {
  const { db, url } = await freshDatabase();
  const store = evidenceStore(db);
  for (let i = 1; i <= n; i++) await store.append(entry(i));
  return { db, url, store };
}

async function rows(db: Db): Promise<RawRow[]> {
  return (await db.raw<{ rows: RawRow[] }>('SELECT * FROM evidence ORDER BY seq')).rows;
}

/** As the test's superuser: switch off the append-only trigger, as an attacker with that power would. */
async function tamper(db: Db, ...statements: string[]) {
  await db.raw('ALTER TABLE evidence DISABLE TRIGGER ALL');
  for (const sql of statements) await db.raw(sql);
}

/**
 * Writes a valid chain of `n` entries straight into the table, byte for byte as `append` would
 * (same envelope, same hashes), in batches: chains longer than a COPY page without 20,000 round
 * trips through the lock. Returns the head.
 */
async function writeChain(db: Db, n: number): Promise<string> {
  let prev = GENESIS_HASH;
  const at = new Date().toISOString();
  for (let seq = 1; seq <= n;) {
    const batch = [];
    for (const end = Math.min(n, seq + 999); seq <= end; seq++) {
      const e = { at, id: `ev_bulk_${seq}`, kind: 'dsp.inbound', process_id: 'neg-1', prev_hash: prev, seq };
      const canonical = Buffer.from(envelopeHead(e) + canonicalize(entry(seq).payload) + envelopeTail(e));
      prev = sha256Hex(canonical);
      batch.push({ ...e, hash: prev, canonical });
    }
    await db('evidence').insert(batch);
  }
  return prev;
}

/**
 * Puts a view named evidence in front of the table whose column canonical, at row `seq`, first
 * runs `step` (PL/pgSQL) on the server: the COPY of a verification meets it mid-stream, after the
 * rows before it were sent. Declared STABLE (which it is not) so that the view is flattened and
 * only a query that reads canonical, the COPY, runs it, not the tail read before it. `holder` is
 * the test's own connection; `restore` puts the table back.
 */
async function gateAt(url: string, seq: number, step: string) {
  const holder = new pg.Client({ connectionString: url });
  holder.on('error', () => undefined); // a server shut down under a failed test must not crash the run
  await holder.connect();
  await holder.query(`
    ALTER TABLE evidence RENAME TO evidence_stored;
    CREATE FUNCTION evidence_gate(seq bigint, canonical bytea) RETURNS bytea LANGUAGE plpgsql STABLE AS $$
    BEGIN
      IF seq = ${seq} THEN ${step}; END IF;
      RETURN canonical;
    END $$;
    CREATE VIEW evidence AS SELECT seq, id, kind, process_id, at, prev_hash, hash,
      evidence_gate(seq, canonical) AS canonical FROM evidence_stored`);
  return {
    holder,
    async restore() {
      await holder.query(`
        DROP VIEW evidence; DROP FUNCTION evidence_gate;
        ALTER TABLE evidence_stored RENAME TO evidence`);
      await holder.end();
    },
  };
}

/**
 * The COPY of a verification stalls at entry `seq`: there it waits for an advisory lock that the
 * gate's holder keeps, until the test cancels or terminates the waiting backend.
 */
async function stallAt(url: string, seq: number) {
  const gate = await gateAt(url, seq, `PERFORM pg_advisory_xact_lock_shared(${STALL_LOCK})`);
  const { holder } = gate;
  await holder.query(`SELECT pg_advisory_lock(${STALL_LOCK})`);
  return {
    /** The backend waiting at the stall (polled: the verifier gets there in its own time). */
    async stalled(): Promise<number> {
      for (let attempt = 0; attempt < 3_000; attempt++) {
        const { rows } = await holder.query<{ pid: number }>(
          `SELECT pid FROM pg_stat_activity WHERE wait_event = 'advisory' AND datname = current_database()`,
        );
        if (rows[0]) return rows[0].pid;
        await new Promise((resolve) => setTimeout(resolve, 10));
      }
      throw new Error('no backend stalled at the gate');
    },
    async signal(fn: 'pg_cancel_backend' | 'pg_terminate_backend', pid: number) {
      const { rows } = await holder.query<{ sent: boolean }>(`SELECT ${fn}($1) AS sent`, [pid]);
      expect(rows[0]!.sent, fn).to.equal(true);
    },
    async restore() {
      await holder.query(`SELECT pg_advisory_unlock(${STALL_LOCK})`);
      await gate.restore();
    },
  };
}
const STALL_LOCK = 7_007;

/** The socket's 'data' listeners of the (only) connection of a pool of one, and that connection. */
async function socketReaders(db: Db) {
  const client = (await db.client.acquireConnection()) as pg.Client;
  await db.client.releaseConnection(client);
  const stream = client.connection.stream;
  return { listeners: () => stream.listeners('data'), pgReader: stream.listeners('data') };
}

/** The backend pid of the (only) connection of a pool of one. */
const backendPid = async (db: Db) =>
  (await db.raw<{ rows: Array<{ pid: number }> }>('SELECT pg_backend_pid() AS pid')).rows[0]!.pid;

const refused = async (promise: Promise<unknown>): Promise<Error> => {
  try {
    await promise;
  } catch (err) {
    return err as Error;
  }
  throw new Error('expected a refusal');
};

describe('evidence chain: appending', () => {
  it('chains entries: seq 1, 2, 3…, each prev_hash the hash before, hash = SHA-256 of the stored bytes', async () => {
    const { db, store } = await chainOf(0);
    const appended: AppendedEvidence[] = [];
    for (let i = 1; i <= 5; i++) appended.push(await store.append(entry(i, i % 2 ? 'neg-1' : null)));
    const stored = await rows(db);
    expect(stored.map((r) => r.seq)).to.deep.equal([1, 2, 3, 4, 5]);
    stored.forEach((row, i) => {
      expect(row.prev_hash).to.equal(i === 0 ? GENESIS_HASH : stored[i - 1]!.hash);
      expect(row.hash)
        .to.equal(sha256Hex(row.canonical))
        .and.match(/^[0-9a-f]{64}$/);
      expect(appended[i]).to.deep.equal({
        id: row.id,
        seq: row.seq,
        hash: row.hash,
        at: row.at.toISOString(),
      });
      expect(row.id).to.match(/^ev_[0-9a-f-]{36}$/);
    });
    expect(GENESIS_HASH).to.equal('0'.repeat(64));
  });

  it('stores the RFC 8785 bytes of {at, id, kind, payload, prev_hash, process_id, seq}', async () => {
    const { db, store } = await chainOf(0);
    const processId = 'neg "quoted" \\ back\u0001slash, é and 😀';
    const payload = { z: 1, a: [true, null, 1.5e-7], é: { y: 'x', b: '\u2028' } };
    await store.append({ kind: 'negotiation.state', process_id: processId, payload });
    const [row] = await rows(db);
    const text = row!.canonical.toString('utf8');
    const envelope = {
      at: row!.at.toISOString(),
      id: row!.id,
      kind: 'negotiation.state',
      payload,
      prev_hash: GENESIS_HASH,
      process_id: processId,
      seq: 1,
    };
    expect(text).to.equal(canonicalize(envelope));
    expect(text).to.equal(
      envelopeHead(envelope) + canonicalize(payload) + envelopeTail(envelope),
      'the spliced form is the library form',
    );
    expect(await store.get(row!.id)).to.deep.include({ payload, process_id: processId, seq: 1 });
    expect((await store.verify()).ok).to.equal(true);
  });

  it('canonicalizes payloads as RFC 8785 does (its numbers/strings and key-sorting examples)', async () => {
    const { db, store } = await chainOf(0);
    // RFC 8785 §3.2.2
    const input = String.raw`{"numbers": [333333333.33333329, 1E30, 4.50, 2e-3, 0.000000000000000000000000001],
      "string": "\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/", "literals": [null, true, false]}`;
    const expected = String.raw`{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],"string":"€$\u000f\nA'B\"\\\\\"/"}`;
    // RFC 8785 §3.2.3: keys sorted by UTF-16 code units
    const sorting = JSON.parse(String.raw`{"\u20ac": "Euro Sign", "\r": "Carriage Return",
      "\ufb33": "Hebrew Letter Dalet With Dagesh", "1": "One", "\ud83d\ude00": "Emoji: Grinning Face",
      "\u0080": "Control", "\u00f6": "Latin Small Letter O With Diaeresis"}`) as Record<string, string>;
    await store.append({ kind: 'test.vector', process_id: null, payload: JSON.parse(input) });
    await store.append({ kind: 'test.vector', process_id: null, payload: sorting });
    const [numbers, sorted] = await rows(db);
    expect(numbers!.canonical.toString('utf8')).to.include(`"payload":${expected},"prev_hash"`);
    // JSON.parse would put "1" first again (integer-like keys): look at the stored text itself.
    const text = sorted!.canonical.toString('utf8');
    const order = [
      'Carriage Return',
      'One',
      'Control',
      'Latin Small Letter O With Diaeresis',
      'Euro Sign',
      'Emoji: Grinning Face',
      'Hebrew Letter Dalet With Dagesh',
    ].map((value) => text.indexOf(`"${value}"`));
    expect(order.every((at, i) => at > 0 && (i === 0 || at > order[i - 1]!))).to.equal(true, text);
    expect(text).to.include('{"\\r":"Carriage Return","1":"One","\u0080":"Control"');
  });

  it('refuses what is not I-JSON, and bad kinds and ids, without appending anything', async () => {
    const { db, store } = await chainOf(0);
    const bad: Array<[unknown, RegExp]> = [
      [{ a: undefined }, /payload\.a: undefined is not JSON/],
      [{ a: [1, Number.NaN] }, /payload\.a\[1\]: NaN/],
      [{ a: Infinity }, /Infinity/],
      [{ s: 'x\ud800y' }, /lone surrogate/],
      [{ ['\udc00']: 1 }, /key contains a lone surrogate/],
      [{ d: new Date() }, /a Date is not JSON/],
      [{ f: () => 1 }, /a function is not JSON/],
      [{ n: 10n }, /a bigint is not JSON/],
      [undefined, /^payload: undefined is not JSON/],
      // eslint-disable-next-line no-sparse-arrays -- the hole is the point
      [{ a: [1, , 3] }, /payload\.a\[1\]: a hole/],
      [{ [Symbol('s')]: 1 }, /symbol key/],
    ];
    for (const [payload, message] of bad) {
      const err = await refused(store.append({ kind: 'dsp.inbound', process_id: null, payload }));
      expect(err, String(message)).to.be.instanceOf(EvidenceInputError);
      expect(err.message).to.match(message);
    }
    for (const kind of ['', 'DSP', 'dsp..x', 'x y']) {
      expect(await refused(store.append({ kind, process_id: null, payload: {} }))).to.be.instanceOf(
        EvidenceInputError,
      );
    }
    expect(await refused(store.append({ id: 'has space', kind: 'a.b', process_id: null, payload: {} })))
      .to.be.instanceOf(EvidenceInputError)
      .with.property('message')
      .that.match(/^id:/);
    expect(await refused(store.append({ kind: 'a.b', process_id: '', payload: {} }))).to.be.instanceOf(
      EvidenceInputError,
    );
    expect(await rows(db)).to.have.length(0);
  });

  it('runs in its own transaction, never inside a caller’s', async () => {
    const { db } = await chainOf(0);
    const err = await refused(db.transaction((trx) => evidenceStore(trx).append(entry(1))));
    expect(err.message).to.match(/own transaction/);
  });

  it('keeps one gap-free, unforked chain under 200 concurrent appends from 8 connection pools', async () => {
    const { url } = await chainOf(0);
    const pools = Array.from({ length: 8 }, () => openAgain(url));
    // Eight writers (as eight processes would be), each appending 25 times in a row, all at once:
    // their batches interleave, so they lose races for the next seq and queue on the lock.
    const perPool = await Promise.all(
      pools.map(async (pool, p) => {
        const store = evidenceStore(pool);
        const mine = [];
        for (let i = 0; i < 25; i++) mine.push(await store.append(entry(p * 100 + i)));
        return mine;
      }),
    );
    const results = perPool.flat();
    expect(results.map((r) => r.seq).sort((a, b) => a - b)).to.deep.equal(
      Array.from({ length: 200 }, (_, i) => i + 1),
    );
    for (const mine of perPool)
      expect(mine.map((r) => r.seq)).to.deep.equal([...mine.map((r) => r.seq)].sort((a, b) => a - b));
    const db = pools[0]!;
    const stored = await rows(db);
    const bySeq = new Map(stored.map((r) => [r.seq, r]));
    for (const r of results) expect(bySeq.get(r.seq)).to.include({ id: r.id, hash: r.hash });
    stored.forEach((row, i) => expect(row.prev_hash).to.equal(i ? stored[i - 1]!.hash : GENESIS_HASH));
    expect(await evidenceStore(db).verify()).to.include({ ok: true, entries: 200, head_seq: 200 });
  });

  it('takes the lock and the real tail when another process appended after its last entry', async () => {
    const { url, store } = await chainOf(2); // two appends: the writer now tries one statement first
    const other = evidenceStore(openAgain(url));
    await other.append(entry(3));
    const next = await store.append(entry(4)); // its one statement names seq 3: taken, so under the lock
    expect(next.seq).to.equal(4);
    await other.append(entry(5));
    await store.append(entry(6));
    await store.append(entry(7));
    expect(await store.verify()).to.include({ ok: true, entries: 7, head_seq: 7 });
  });

  it('records a caller-chosen id once: again (even concurrently, from another pool) returns the first entry', async () => {
    const { db, url, store } = await chainOf(2);
    const first = await store.append({ ...entry(7), id: 'ev_chosen-1' });
    expect(await store.append({ ...entry(7), id: 'ev_chosen-1' })).to.deep.equal(first);
    // Key order does not matter: the canonical payload is what is compared.
    expect(
      await store.append({
        ...entry(7),
        id: 'ev_chosen-1',
        payload: { n: 7, '@type': 'ContractRequestMessage' },
      }),
    ).to.deep.equal(first);

    const other = evidenceStore(openAgain(url));
    const together = await Promise.all([
      ...Array.from({ length: 5 }, () => store.append({ ...entry(8), id: 'ev_chosen-2' })),
      ...Array.from({ length: 5 }, () => other.append({ ...entry(8), id: 'ev_chosen-2' })),
      store.append(entry(9)),
    ]);
    expect(new Set(together.slice(0, 10).map((r) => JSON.stringify(r))).size).to.equal(1);
    const ids = (await rows(db)).map((r) => r.id);
    expect(ids.filter((id) => id === 'ev_chosen-1')).to.have.length(1);
    expect(ids.filter((id) => id === 'ev_chosen-2')).to.have.length(1);
    expect(ids).to.have.length(5);

    const clash = await refused(store.append({ ...entry(99), id: 'ev_chosen-1' }));
    expect(clash).to.be.instanceOf(EvidenceConflictError);
    expect(await store.verify()).to.include({ ok: true, entries: 5 });
  });

  it('reads entries back by id and by process, oldest first', async () => {
    const { store } = await chainOf(0);
    const a = await store.append(entry(1, 'neg-a'));
    await store.append(entry(2, 'neg-b'));
    const c = await store.append(entry(3, 'neg-a'));
    expect((await store.forProcess('neg-a')).map((e) => [e.id, e.seq])).to.deep.equal([
      [a.id, 1],
      [c.id, 3],
    ]);
    expect(await store.get(c.id)).to.deep.equal({
      ...c,
      kind: 'dsp.inbound',
      process_id: 'neg-a',
      prev_hash: (await store.forProcess('neg-b'))[0]!.hash,
      payload: { '@type': 'ContractRequestMessage', n: 3 },
    });
    expect(await store.get('ev_nope')).to.equal(undefined);
    expect(await store.forProcess('nope')).to.deep.equal([]);
  });
});

describe('evidence chain: the append-only trigger', () => {
  it('refuses UPDATE, DELETE and TRUNCATE, even of no rows', async () => {
    const { db } = await chainOf(2);
    for (const sql of [
      "UPDATE evidence SET kind = 'x.y' WHERE seq = 1",
      'UPDATE evidence SET kind = kind WHERE false',
      'DELETE FROM evidence WHERE seq = 2',
      'TRUNCATE evidence',
    ]) {
      const err = await refused(db.raw(sql));
      expect(err.message, sql).to.match(/evidence is append-only: (UPDATE|DELETE|TRUNCATE) is not allowed/);
    }
    expect(await rows(db)).to.have.length(2);
  });
});

describe('evidence chain: verification', () => {
  it('reports an empty chain as unbroken with no head', async () => {
    const { store } = await chainOf(0);
    expect(await store.verify()).to.deep.equal(EMPTY_CHAIN);
  });

  it('reports N entries, the head and its seq', async () => {
    const { store } = await chainOf(12);
    const last = await store.append(entry(13));
    expect(await store.verify()).to.deep.equal({
      ok: true,
      entries: 13,
      head: last.hash,
      head_seq: 13,
      first_broken_seq: null,
      last_anchor: null,
    });
  });

  it(`verifies across pages (more than one COPY page of ${VERIFY_PAGE_SIZE.toLocaleString('en-US')})`, async () => {
    const { db, store } = await chainOf(0);
    const n = VERIFY_PAGE_SIZE + 50;
    await Promise.all(Array.from({ length: n }, (_, i) => store.append(entry(i))));
    expect(await store.verify()).to.include({ ok: true, entries: n, head_seq: n });
    // the first entry of the second page removed: the page boundary must not hide the gap
    await tamper(db, `DELETE FROM evidence WHERE seq = ${VERIFY_PAGE_SIZE + 1}`);
    expect(await store.verify()).to.include({
      ok: false,
      first_broken_seq: VERIFY_PAGE_SIZE + 1,
      entries: n - 1,
    });
  });

  describe('when the server ends the statement in the middle of the COPY', () => {
    // The second page of a chain longer than one stalls part-way; another connection then ends it.
    const n = VERIFY_PAGE_SIZE + 2_000;
    const stall = VERIFY_PAGE_SIZE + 1_000;

    const cases = [
      {
        how: 'pg_cancel_backend',
        says: 'canceling statement due to user request',
        code: '57014',
        then: 'the same connection, in step, serves the next query',
        reused: true,
      },
      {
        how: 'pg_terminate_backend',
        says: 'terminating connection due to administrator command',
        code: '57P01',
        then: 'the pool replaces the dead connection',
        reused: false,
      },
    ] as const;

    for (const c of cases) {
      it(`fails clearly after ${c.how}, and ${c.then}`, async () => {
        const { db, url } = await freshDatabase();
        const head = await writeChain(db, n);
        const single = openAgain(url, 1); // one connection: the next query runs where the failure was
        const pid = await backendPid(single);
        const socket = await socketReaders(single);
        // pg's protocol parser is the socket's one reader: what the verifier takes over (decision 0006)
        expect(socket.pgReader).to.have.length(1);
        const gate = await stallAt(url, stall);
        try {
          const verifying = refused(evidenceStore(single).verify());
          expect(await gate.stalled()).to.equal(pid);
          // mid-stream the verifier reads the socket itself…
          expect(socket.listeners()).to.have.length(1).and.not.include(socket.pgReader[0]);
          await gate.signal(c.how, pid);
          const err = await verifying;
          expect(err).to.be.instanceOf(VerificationFailed);
          expect(err.message).to.match(
            new RegExp(`^evidence verification failed after seq \\d+: ${c.says}$`),
          );
          expect(err.cause).to.include({ code: c.code });
          // the first page was read whole, the second one up to the stall at most
          expect((err as VerificationFailed).afterSeq).to.be.within(VERIFY_PAGE_SIZE, stall - 1);
          // …and has handed it back to pg, whose parser read the error
          expect(socket.listeners()).to.deep.equal(socket.pgReader);
        } finally {
          await gate.restore();
        }
        expect((await backendPid(single)) === pid).to.equal(c.reused);
        expect(await evidenceStore(single).verify()).to.deep.include({
          ok: true,
          entries: n,
          head,
          head_seq: n,
        });
      });
    }
  });

  it('verifies on when a notice comes in the middle of the COPY (pg parses the rest), and finds a break after it', async () => {
    const { db, url } = await freshDatabase();
    const n = VERIFY_PAGE_SIZE + 2_000;
    const head = await writeChain(db, n);
    // the verifier hands the socket back at the first message that is not CopyData
    const gate = await gateAt(url, VERIFY_PAGE_SIZE + 1_000, `RAISE NOTICE 'in the middle'`);
    try {
      expect(await evidenceStore(db).verify()).to.deep.include({ ok: true, entries: n, head, head_seq: n });
      await gate.holder.query(
        `ALTER TABLE evidence_stored DISABLE TRIGGER ALL; UPDATE evidence_stored SET kind = 'operator.decision' WHERE seq = ${n - 1}`,
      );
      expect(await evidenceStore(db).verify()).to.deep.include({
        ok: false,
        first_broken_seq: n - 1,
        entries: n,
      });
    } finally {
      await gate.restore();
    }
  });

  it('verifies entries far larger than a socket read, and finds a byte changed inside one', async () => {
    const { db, store } = await chainOf(2);
    // ~600 KB of canonical bytes each (a socket read is 64 KiB): ASCII, multi-byte UTF-8 and escapes
    const big = (n: number) => ({
      kind: 'dsp.inbound',
      process_id: 'neg-1',
      payload: { n, text: 'a'.repeat(300_000) + 'é☃😀"\\\n'.repeat(25_000) },
    });
    for (let i = 3; i <= 5; i++) await store.append(i === 4 ? entry(i) : big(i));
    await store.append(big(6));
    await store.append(entry(7));
    const before = await store.verify();
    expect(before).to.deep.include({ ok: true, entries: 7, head_seq: 7 });
    expect((await rows(db))[5]!.canonical.length).to.be.greaterThan(500_000);
    // one ASCII byte in the middle of entry 6: still UTF-8, no longer what was hashed
    await tamper(
      db,
      `UPDATE evidence SET canonical = overlay(canonical PLACING 'b'::bytea FROM 200000 FOR 1) WHERE seq = 6`,
    );
    expect(await store.verify()).to.deep.include({
      ok: false,
      first_broken_seq: 6,
      entries: 7,
      head: before.head,
    });
    // and with its hash recomputed, the next entry no longer links
    await db.raw(`UPDATE evidence SET hash = encode(sha256(canonical), 'hex') WHERE seq = 6`);
    expect(await store.verify()).to.deep.include({ ok: false, first_broken_seq: 7, entries: 7 });
  });

  it('verifies entries whose columns JSON escapes (quotes, backslashes, control characters) or that are not ASCII', async () => {
    const { db, store } = await chainOf(0);
    const odd = ['neg-"quoted"', 'neg\\back\\slash', 'neg\ttab\nline', 'négociation-☃-😀', null];
    for (const processId of odd) await store.append(entry(1, processId));
    expect(await store.verify()).to.include({ ok: true, entries: odd.length });
    await tamper(db, `UPDATE evidence SET process_id = 'neg-"quoted!"' WHERE seq = 1`);
    expect(await store.verify()).to.include({ ok: false, first_broken_seq: 1 });
  });

  const cases: Array<{ what: string; statements: string[]; broken: number; entries?: number }> = [
    {
      what: 'a payload altered',
      statements: [
        `UPDATE evidence SET canonical = convert_to(replace(convert_from(canonical, 'UTF8'), '"n":4', '"n":40'), 'UTF8') WHERE seq = 4`,
      ],
      broken: 4,
    },
    {
      what: 'a payload altered and its hash recomputed (the next link breaks)',
      statements: [
        `UPDATE evidence SET canonical = convert_to(replace(convert_from(canonical, 'UTF8'), '"n":4', '"n":40'), 'UTF8') WHERE seq = 4`,
        `UPDATE evidence SET hash = encode(sha256(canonical), 'hex') WHERE seq = 4`,
      ],
      broken: 5,
    },
    {
      what: 'a middle entry removed',
      statements: ['DELETE FROM evidence WHERE seq = 5'],
      broken: 5,
      entries: 7,
    },
    {
      what: 'the first entry removed',
      statements: ['DELETE FROM evidence WHERE seq = 1'],
      broken: 1,
      entries: 7,
    },
    {
      what: 'two entries swapped (reordered)',
      statements: [
        'UPDATE evidence SET seq = seq + 1000 WHERE seq IN (3, 6)',
        'UPDATE evidence SET seq = CASE seq WHEN 1003 THEN 6 ELSE 3 END WHERE seq IN (1003, 1006)',
      ],
      broken: 3,
    },
    {
      what: 'two entries’ contents swapped',
      statements: [
        `UPDATE evidence a SET canonical = b.canonical, hash = b.hash FROM evidence b
         WHERE (a.seq, b.seq) IN ((3, 6), (6, 3))`,
      ],
      broken: 3,
    },
    {
      what: 'a column no longer matching the hashed bytes (kind)',
      statements: [`UPDATE evidence SET kind = 'operator.decision' WHERE seq = 6`],
      broken: 6,
    },
    {
      what: 'at moved by one microsecond',
      statements: [`UPDATE evidence SET at = at + interval '1 microsecond' WHERE seq = 2`],
      broken: 2,
    },
    {
      what: 'process_id changed',
      statements: [`UPDATE evidence SET process_id = 'neg-2' WHERE seq = 7`],
      broken: 7,
    },
    {
      what: 'stored bytes that are not UTF-8',
      statements: [`UPDATE evidence SET canonical = canonical || '\\xff'::bytea WHERE seq = 3`],
      broken: 3,
    },
    {
      what: 'a prev_hash column changed',
      statements: [`UPDATE evidence SET prev_hash = '${'1'.repeat(64)}' WHERE seq = 8`],
      broken: 8,
    },
  ];

  for (const c of cases) {
    it(`finds ${c.what} at seq ${c.broken}`, async () => {
      const { db, store } = await chainOf(8);
      const before = await store.verify();
      await tamper(db, ...c.statements);
      const result = await store.verify();
      expect(result).to.deep.include({ ok: false, first_broken_seq: c.broken, entries: c.entries ?? 8 });
      if (!c.entries) expect(result.head).to.equal(before.head);
    });
  }

  it('finds a forged entry inserted in the middle (self-consistent, but the next one no longer links)', async () => {
    const { db, store } = await chainOf(8);
    const stored = await rows(db);
    const at = new Date().toISOString();
    const forged = {
      at,
      id: 'ev_forged',
      kind: 'operator.decision',
      prev_hash: stored[3]!.hash,
      process_id: null,
      seq: 5,
    };
    const canonical = Buffer.from(envelopeHead(forged) + '{"approved":true}' + envelopeTail(forged));
    await tamper(
      db,
      'UPDATE evidence SET seq = seq + 1000 WHERE seq >= 5',
      'UPDATE evidence SET seq = seq - 999 WHERE seq >= 1005',
    );
    await db('evidence').insert({ ...forged, hash: sha256Hex(canonical), canonical });
    expect(await store.verify()).to.deep.include({ ok: false, first_broken_seq: 6, entries: 9, head_seq: 9 });
  });

  it('finds a forged entry appended with a wrong prev_hash', async () => {
    const { db, store } = await chainOf(3);
    const forged = {
      at: new Date().toISOString(),
      id: 'ev_forged',
      kind: 'a.b',
      prev_hash: GENESIS_HASH,
      process_id: null,
      seq: 4,
    };
    const canonical = Buffer.from(envelopeHead(forged) + '{}' + envelopeTail(forged));
    await db('evidence').insert({ ...forged, hash: sha256Hex(canonical), canonical });
    expect(await store.verify()).to.deep.include({ ok: false, first_broken_seq: 4, entries: 4 });
  });

  it('cannot see a removed tail on its own: that is what anchors are for (last_anchor)', async () => {
    const { db, store } = await chainOf(4);
    await tamper(db, 'DELETE FROM evidence WHERE seq = 4');
    expect(await store.verify()).to.deep.include({ ok: true, entries: 3, head_seq: 3, last_anchor: null });
  });
});

describe('evidence chain: the appendEvidence activity', () => {
  const quiet: Logger = { log() {}, trace() {}, debug() {}, info() {}, warn() {}, error() {} };

  /** Runs the activity as Temporal would: attempt `attempt` of activity `activityId` of one workflow run. */
  function inActivity(db: Db, activityId: string, attempt = 1) {
    const activities = createEvidenceActivities({ db });
    const environment = new MockActivityEnvironment(
      { activityId, attempt, workflowExecution: { workflowId: 'negotiation/neg-1', runId: 'run-1' } },
      { logger: quiet },
    );
    return (e: NewEvidence) =>
      environment.run<[NewEvidence], AppendedEvidence, (x: NewEvidence) => Promise<AppendedEvidence>>(
        (x) => activities.appendEvidence(x),
        e,
      );
  }

  it('records one entry per activity call, however often Temporal runs it', async () => {
    const { db } = await chainOf(0);
    const first = await inActivity(db, '3')(entry(1));
    const retried = await inActivity(db, '3', 2)(entry(1));
    const nextCall = await inActivity(db, '4')(entry(1));
    expect(retried).to.deep.equal(first);
    expect(first.id).to.match(/^ev_[0-9a-f]{32}$/);
    expect(nextCall.seq).to.equal(2);
    const chosen = await inActivity(db, '5')({ ...entry(2), id: 'ev_msg-1' });
    expect(chosen).to.include({ id: 'ev_msg-1', seq: 3 });
    expect(await inActivity(db, '6')({ ...entry(2), id: 'ev_msg-1' })).to.deep.equal(chosen);
    // Outside an activity there is nothing to derive an id from: each call is a new entry.
    expect((await createEvidenceActivities({ db }).appendEvidence(entry(1))).seq).to.equal(4);
    expect(await rows(db)).to.have.length(4);
  });

  it('fails without retry when the entry itself is wrong', async () => {
    const { db } = await chainOf(0);
    const append = inActivity(db, '1');
    const err = await refused(append({ kind: 'Not A Kind', process_id: null, payload: {} }));
    expect(err).to.be.instanceOf(ApplicationFailure).with.property('nonRetryable', true);
    expect(err).to.have.property('type', 'EvidenceInputError');
    await append({ ...entry(1), id: 'ev_taken' });
    const clash = await refused(append({ ...entry(2), id: 'ev_taken' }));
    expect(clash).to.have.property('type', 'EvidenceConflictError');
    expect(clash).to.have.property('nonRetryable', true);
  });
});

describe('evidence chain: GET /api/v1/evidence/chain/verify', () => {
  let connector: TestConnector;
  let viewerKey: string;
  before(async () => {
    connector = await startTestConnector({ name: 'evidence' });
    const created = await client(connector.url, connector.adminKey).post('/api/v1/api-keys', {
      name: 'auditor',
      role: 'viewer',
    });
    viewerKey = created.body.key as string;
  });
  after(() => connector?.stop());

  const verify = () => client(connector.url, viewerKey).get('/api/v1/evidence/chain/verify');

  it('answers the chain verification of a fresh connector to a viewer', async () => {
    const res = await verify();
    expect(res.status).to.equal(200);
    expect(res.body).to.deep.equal(EMPTY_CHAIN);
  });

  it('refuses a call without a key: unauthenticated', async () => {
    expectError(await client(connector.url).get('/api/v1/evidence/chain/verify'), 401, 'unauthenticated');
  });

  it('reports the head after appends, and where the chain breaks after tampering', async () => {
    const store = evidenceStore(connector.db);
    await store.append(entry(1));
    await store.append(entry(2));
    const head = await store.append(entry(3));
    expect((await verify()).body).to.deep.equal({
      ok: true,
      entries: 3,
      head: head.hash,
      head_seq: 3,
      first_broken_seq: null,
      last_anchor: null,
    });
    await tamper(
      connector.db,
      `UPDATE evidence SET canonical = convert_to(replace(convert_from(canonical, 'UTF8'), '"n":2', '"n":20'), 'UTF8') WHERE seq = 2`,
    );
    const res = await verify();
    expect(res.status).to.equal(200);
    expect(res.body).to.deep.equal({
      ...EMPTY_CHAIN,
      ok: false,
      entries: 3,
      head: head.hash,
      head_seq: 3,
      first_broken_seq: 2,
    });
  });

  it('answers internal (500, code and message) when the database ends the verification, then verifies again', async () => {
    const store = evidenceStore(connector.db);
    for (let i = 1; i <= 3; i++) await store.append(entry(i));
    const before = (await verify()).body as ChainVerification;
    const gate = await stallAt(connector.databaseUrl, before.head_seq! - 1);
    try {
      const answer = verify();
      await gate.signal('pg_cancel_backend', await gate.stalled());
      const res = await answer;
      expectError(res, 500, 'internal', /^internal error \(request /);
    } finally {
      await gate.restore();
    }
    expect((await verify()).body).to.deep.equal(before);
  });

  it('is in the OpenAPI document with its response schema and role', async () => {
    const doc = (await client(connector.url).get('/api/v1/openapi.json')).body;
    const get = doc.paths['/api/v1/evidence/chain/verify'].get;
    expect(get['x-required-role']).to.equal('viewer');
    expect(JSON.stringify(get.responses)).to.include('first_broken_seq');
  });
});
