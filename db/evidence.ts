/**
 * The hash-chained evidence log (docs/evidence.md): append entries to one linear chain, read
 * them back, and verify the whole chain.
 *
 * Each entry is hashed over its canonical form, the RFC 8785 (JCS) bytes of
 *   {"at","id","kind","payload","prev_hash","process_id","seq"}
 * and hash = hex SHA-256 of exactly those bytes (no separate prefix: prev_hash is inside them).
 * Because the bytes contain seq and prev_hash, an entry is bound to its position and to
 * everything before it; they are stored as they were hashed, so verification never depends on
 * serializing anything again.
 */
import { hash as digest, randomUUID } from 'node:crypto';
import type pg from 'pg';
import canonicalizeModule from 'canonicalize';
import type { Db } from './knex.js';
import { isUniqueViolation } from './paging.js';
import { RESOURCE_ID_PATTERN } from '../domain/ids.js';
import { GENESIS_HASH, verifyEntries, type ChainVerification } from './evidence-verify.js';

export {
  GENESIS_HASH,
  VERIFY_PAGE_SIZE,
  VerificationFailed,
  type ChainVerification,
} from './evidence-verify.js';

// canonicalize 2.1.0 is CommonJS (`module.exports = serialize`) but its types declare an ES
// default export, which NodeNext reads as `{ default }`; at run time the default import is the function.
const canonicalize = canonicalizeModule as unknown as (value: unknown) => string | undefined;

/** Evidence is about messages and decisions, not bulk data: larger payloads are refused. */
export const MAX_PAYLOAD_BYTES = 4 * 1024 * 1024;
/** Entries written in one transaction at most (the rest go in the next one). */
const MAX_BATCH = 500;
const KIND_PATTERN = /^[a-z][a-z0-9_-]*(\.[a-z0-9_-]+)*$/;
const LONE_SURROGATE = /\p{Cs}/u;

export interface NewEvidence {
  /** Caller-chosen id (e.g. derived from a Temporal activity): appending it again returns the first entry. */
  id?: string;
  /** What happened, e.g. `dsp.inbound`, `dsp.outbound`, `negotiation.state`, `operator.decision`. */
  kind: string;
  process_id: string | null;
  /** Any JSON value (I-JSON: finite numbers, well-formed strings, plain objects and arrays). */
  payload: unknown;
}

export interface AppendedEvidence {
  id: string;
  seq: number;
  hash: string;
  at: string;
}

export interface EvidenceEntry extends AppendedEvidence {
  kind: string;
  process_id: string | null;
  prev_hash: string;
  payload: unknown;
}

/** A caller's mistake in what it asked to record (retrying cannot help). */
export class EvidenceInputError extends Error {
  override name = 'EvidenceInputError';
}

/** The id is taken by an entry with other content: a caller reused an id for something else. */
export class EvidenceConflictError extends Error {
  override name = 'EvidenceConflictError';
}

interface ChainPosition {
  seq: number;
  hash: string;
}

const GENESIS: ChainPosition = { seq: 0, hash: GENESIS_HASH };

/** An entry's columns, with its canonical bytes as UTF-8 text (null: the bytes are not UTF-8). */
interface EntryRow {
  seq: number;
  id: string;
  kind: string;
  process_id: string | null;
  /** RFC 3339 with milliseconds, as in the canonical form (null: not a millisecond instant). */
  at: string | null;
  prev_hash: string;
  hash: string;
  canonical: string | null;
}

// ---------------------------------------------------------------------------------------------
// Canonical form. The envelope's keys sorted by UTF-16 code units (RFC 8785 §3.2.3) are
// at < id < kind < payload < prev_hash < process_id < seq, so the text is always
// head + canonical(payload) + tail. Building it that way lets verification compare a row's
// columns with the stored bytes without parsing them; a test holds it equal to canonicalize().
// JSON.stringify of a well-formed string is RFC 8785's string form (§3.2.2.2).

/** `{"at":…,"id":…,"kind":…,"payload":` */
export function envelopeHead(e: { at: string; id: string; kind: string }): string {
  return `{"at":${JSON.stringify(e.at)},"id":${JSON.stringify(e.id)},"kind":${JSON.stringify(e.kind)},"payload":`;
}

/** `,"prev_hash":…,"process_id":…,"seq":…}` */
export function envelopeTail(e: { prev_hash: string; process_id: string | null; seq: number }): string {
  return `,"prev_hash":"${e.prev_hash}","process_id":${JSON.stringify(e.process_id)},"seq":${e.seq}}`;
}

/** Hex SHA-256; a string is hashed as its UTF-8 bytes. */
export const sha256Hex = (data: string | Buffer): string => digest('sha256', data, 'hex');

/**
 * Where the payload lies in an entry's text, or undefined when the row's columns do not frame it
 * exactly as envelopeHead and envelopeTail write them. Verification calls this for every entry,
 * so it compares piece by piece in place rather than building both strings (that garbage was a
 * fifth of verify's time).
 */
function payloadBounds(row: EntryRow): { start: number; end: number } | undefined {
  const text = row.canonical;
  if (text === null || row.at === null) return undefined;
  let start = after(text, 0, '{"at":');
  start = afterString(text, start, row.at);
  start = after(text, start, ',"id":');
  start = afterString(text, start, row.id);
  start = after(text, start, ',"kind":');
  start = afterString(text, start, row.kind);
  start = after(text, start, ',"payload":');
  let end = before(text, text.length, '}');
  end = before(text, end, String(row.seq));
  end = before(text, end, ',"seq":');
  end = beforeString(text, end, row.process_id);
  end = before(text, end, ',"process_id":');
  end = beforeString(text, end, row.prev_hash);
  end = before(text, end, ',"prev_hash":');
  return start >= 0 && end >= start ? { start, end } : undefined;
}

/** Position after `part` when `text` has it at `pos`, else -1 (and -1 stays -1). */
const after = (text: string, pos: number, part: string) =>
  pos >= 0 && text.startsWith(part, pos) ? pos + part.length : -1;

/** Position of `part` when `text` has it just before `end`, else -1. */
const before = (text: string, end: number, part: string) =>
  end >= 0 && text.endsWith(part, end) ? end - part.length : -1;

/** JSON.stringify needs to escape nothing in most strings; then the value is compared as it is. */
// eslint-disable-next-line no-control-regex -- control characters are exactly what JSON escapes
const NEEDS_ESCAPE = /["\\\u0000-\u001f]/;

function afterString(text: string, pos: number, value: string | null): number {
  if (value === null) return after(text, pos, 'null');
  if (NEEDS_ESCAPE.test(value)) return after(text, pos, JSON.stringify(value));
  return after(text, after(text, after(text, pos, '"'), value), '"');
}

function beforeString(text: string, end: number, value: string | null): number {
  if (value === null) return before(text, end, 'null');
  if (NEEDS_ESCAPE.test(value)) return before(text, end, JSON.stringify(value));
  return before(text, before(text, before(text, end, '"'), value), '"');
}

/** The canonical payload inside an entry's text, or undefined when the row's columns do not frame it. */
function framedPayload(row: EntryRow): string | undefined {
  const bounds = payloadBounds(row);
  return bounds && row.canonical!.slice(bounds.start, bounds.end);
}

/**
 * RFC 8785 requires I-JSON input. canonicalize() would silently drop `undefined` members and
 * turn a lone surrogate into an escape, so what is hashed could differ from what was meant:
 * anything outside plain JSON is refused instead, naming where it is.
 */
function assertIJson(value: unknown, path: string, depth = 0): void {
  if (depth > 64) throw new EvidenceInputError(`${path}: nested more than 64 levels`);
  if (value === null || typeof value === 'boolean') return;
  if (typeof value === 'number') {
    if (!Number.isFinite(value)) throw new EvidenceInputError(`${path}: ${value} is not a JSON number`);
    return;
  }
  if (typeof value === 'string') {
    if (LONE_SURROGATE.test(value)) throw new EvidenceInputError(`${path}: contains a lone surrogate`);
    return;
  }
  if (Array.isArray(value)) {
    for (let i = 0; i < value.length; i++) {
      // canonicalize() would skip a hole where JSON.stringify writes null
      if (!(i in value)) throw new EvidenceInputError(`${path}[${i}]: a hole in an array is not JSON`);
      assertIJson(value[i], `${path}[${i}]`, depth + 1);
    }
    return;
  }
  if (typeof value === 'object' && isPlainObject(value)) {
    if (Object.getOwnPropertySymbols(value).length)
      throw new EvidenceInputError(`${path}: a symbol key is not JSON`);
    for (const [key, item] of Object.entries(value)) {
      if (LONE_SURROGATE.test(key)) throw new EvidenceInputError(`${path}: a key contains a lone surrogate`);
      assertIJson(item, `${path}.${key}`, depth + 1);
    }
    return;
  }
  throw new EvidenceInputError(`${path}: ${describe(value)} is not JSON`);
}

function isPlainObject(value: object): boolean {
  const proto = Object.getPrototypeOf(value) as unknown;
  return proto === Object.prototype || proto === null;
}

const describe = (value: unknown) =>
  value === undefined
    ? 'undefined'
    : typeof value === 'object'
      ? `a ${(value as object).constructor?.name ?? 'object'}`
      : `a ${typeof value}`;

interface ValidEntry {
  id: string;
  /** Whether the caller chose the id (then it may be recorded already). */
  chosen: boolean;
  kind: string;
  process_id: string | null;
  /** canonicalize(payload) */
  payload: string;
}

function validateEntry(entry: NewEvidence): ValidEntry {
  if (entry.id !== undefined && !RESOURCE_ID_PATTERN.test(entry.id))
    throw new EvidenceInputError(`id: '${entry.id}' is not a valid id`);
  if (typeof entry.kind !== 'string' || !KIND_PATTERN.test(entry.kind) || entry.kind.length > 100)
    throw new EvidenceInputError(`kind: '${entry.kind}' is not a kind such as dsp.inbound`);
  const pid = entry.process_id;
  if (pid !== null && (typeof pid !== 'string' || !pid || pid.length > 500 || LONE_SURROGATE.test(pid)))
    throw new EvidenceInputError('process_id: must be null or a string of 1 to 500 characters');
  assertIJson(entry.payload, 'payload');
  const payload = canonicalize(entry.payload)!;
  const size = Buffer.byteLength(payload, 'utf8');
  if (size > MAX_PAYLOAD_BYTES)
    throw new EvidenceInputError(`payload: ${size} bytes, at most ${MAX_PAYLOAD_BYTES} are kept`);
  return {
    id: entry.id ?? `ev_${randomUUID()}`,
    chosen: entry.id !== undefined,
    kind: entry.kind,
    process_id: pid,
    payload,
  };
}

interface ChainedRow {
  seq: number;
  id: string;
  kind: string;
  process_id: string | null;
  at: string;
  prev_hash: string;
  hash: string;
  canonical: Buffer;
}

/** Places entries after `tail`: each one's canonical bytes carry its seq and its predecessor's hash. */
function chainAfter(tail: ChainPosition, entries: ValidEntry[], at: string): ChainedRow[] {
  let prev = tail;
  return entries.map((e) => {
    const seq = prev.seq + 1;
    const canonical = Buffer.from(
      envelopeHead({ at, id: e.id, kind: e.kind }) +
        e.payload +
        envelopeTail({ prev_hash: prev.hash, process_id: e.process_id, seq }),
      'utf8',
    );
    const row = {
      seq,
      id: e.id,
      kind: e.kind,
      process_id: e.process_id,
      at,
      prev_hash: prev.hash,
      hash: sha256Hex(canonical),
      canonical,
    };
    prev = row;
    return row;
  });
}

const appended = (r: { id: string; seq: number; hash: string; at: string | null }): AppendedEvidence => ({
  id: r.id,
  seq: r.seq,
  hash: r.hash,
  at: r.at ?? '',
});

// ---------------------------------------------------------------------------------------------
// Statements. They run on a pooled connection of the knex instance as named (prepared)
// statements, rows as arrays: planning and per-row object building were most of their cost.

/** knex's pg dialect pools plain pg.Client connections. */
type Client = pg.Client;

/**
 * The chain's lock: a transaction-level advisory lock (key: 'evidence' in ASCII). Every write
 * takes it, so writers in several processes queue up instead of failing each other; it is held
 * from the INSERT to the commit, never across round trips of the application (bench/evidence.ts
 * compares the textbook head row locked FOR UPDATE, which holds its lock across four).
 */
const CHAIN_LOCK = '7311146925001958245';

/**
 * The append: one statement, so one short transaction. It takes the chain's lock, then inserts
 * the rows only if the entry they follow is there with the hash they carry; the primary key
 * refuses a seq that another writer took first. No gap, no fork, whatever the writer believed.
 * (The lock and EXISTS are constant conditions: a one-time filter, evaluated before any row.)
 */
const INSERT_AFTER = `
  WITH chain_lock AS MATERIALIZED (SELECT pg_advisory_xact_lock(${CHAIN_LOCK}))
  INSERT INTO evidence (seq, id, kind, process_id, at, prev_hash, hash, canonical)
  SELECT * FROM unnest($1::bigint[], $2::text[], $3::text[], $4::text[], $5::timestamptz[],
                       $6::text[], $7::text[], $8::bytea[])
  WHERE (SELECT count(*) FROM chain_lock) = 1
    AND ($9::bigint = 0 OR EXISTS (SELECT 1 FROM evidence WHERE seq = $9 AND hash = $10))`;

/**
 * `at` exactly as the canonical form writes it, or null when it is not a whole millisecond (an
 * `at` moved by less than a millisecond must not pass for the one that was hashed).
 */
const AT_TEXT = `CASE WHEN date_trunc('milliseconds', at) = at
  THEN to_char(at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') END`;
const ROW_COLUMNS = `seq, id, kind, process_id, ${AT_TEXT} AS at, prev_hash, hash`;

type RowArray = [number, string, string, string | null, string | null, string, string, string | Buffer];

function toEntryRow(r: RowArray): EntryRow {
  const [seq, id, kind, process_id, at, prev_hash, hash, canonical] = r;
  return { seq, id, kind, process_id, at, prev_hash, hash, canonical: asText(canonical) };
}

/** Stored bytes as text, or null when they are not UTF-8 (never true of an entry we wrote). */
function asText(canonical: string | Buffer): string | null {
  if (typeof canonical === 'string') return canonical;
  const text = canonical.toString('utf8');
  return Buffer.from(text, 'utf8').equals(canonical) ? text : null;
}

/** A pooled connection of the knex instance (knex cannot name statements or return arrays). */
async function withConnection<T>(db: Db, use: (client: Client) => Promise<T>): Promise<T> {
  const client = (await db.client.acquireConnection()) as Client;
  try {
    return await use(client);
  } finally {
    await db.client.releaseConnection(client);
  }
}

async function readTail(client: Client): Promise<ChainPosition> {
  const { rows } = await client.query<ChainPosition>({
    name: 'evidence_tail_v1',
    text: 'SELECT seq, hash FROM evidence ORDER BY seq DESC LIMIT 1',
  });
  return rows[0] ?? GENESIS;
}

/**
 * Runs `use` in a transaction that holds the chain's lock, with the tail read under it. BEGIN,
 * the lock and the read share one round trip; nobody else can append until COMMIT.
 */
async function underChainLock<T>(client: Client, use: (tail: ChainPosition) => Promise<T>): Promise<T> {
  try {
    const results = (await client.query(
      `BEGIN; SELECT pg_advisory_xact_lock(${CHAIN_LOCK}); SELECT seq, hash FROM evidence ORDER BY seq DESC LIMIT 1`,
    )) as unknown as [pg.QueryResult, pg.QueryResult, pg.QueryResult<ChainPosition>];
    const result = await use(results[2].rows[0] ?? GENESIS);
    await client.query('COMMIT');
    return result;
  } catch (err) {
    await client.query('ROLLBACK').catch(() => undefined);
    throw err;
  }
}

/** How many rows went in: all of them, or none when `tail` is not the entry before them. */
async function insertAfter(client: Client, tail: ChainPosition, rows: ChainedRow[]): Promise<number> {
  const column = <K extends keyof ChainedRow>(k: K) => rows.map((r) => r[k]);
  const values = [
    ...(['seq', 'id', 'kind', 'process_id', 'at', 'prev_hash', 'hash', 'canonical'] as const).map(column),
    tail.seq,
    tail.hash,
  ];
  const result = await client.query({ name: 'evidence_insert_after_v1', text: INSERT_AFTER, values });
  return result.rowCount ?? 0;
}

async function readRows(client: Client, where: string, values: unknown[]): Promise<EntryRow[]> {
  const { rows } = await client.query<RowArray>({
    text: `SELECT ${ROW_COLUMNS}, canonical FROM evidence WHERE ${where} ORDER BY seq`,
    values,
    rowMode: 'array',
  });
  return rows.map(toEntryRow);
}

function toEntry(row: EntryRow): EvidenceEntry {
  // A row whose columns no longer frame its bytes is shown as stored; verify() reports it.
  const payload = framedPayload(row) ?? row.canonical;
  return {
    id: row.id,
    seq: row.seq,
    hash: row.hash,
    at: row.at ?? '',
    kind: row.kind,
    process_id: row.process_id,
    prev_hash: row.prev_hash,
    payload: payload === null ? null : JSON.parse(payload),
  };
}

// ---------------------------------------------------------------------------------------------
// Appending

interface Pending {
  entry: ValidEntry;
  resolve: (value: AppendedEvidence) => void;
  reject: (err: unknown) => void;
}

/**
 * One writer per knex instance (so one per process). It remembers the entry it wrote last: when
 * nobody else writes in between, an append is one statement after it (INSERT_AFTER). The
 * appends that arrive while a write is in flight go into the next statement together: one
 * transaction and one commit for all of them. When another process wrote in between, that
 * statement inserts nothing or hits the primary key; the writer then takes the chain's lock and
 * reads the tail under it, which cannot fail that way, and keeps doing so while others write.
 */
class ChainWriter {
  /** The entry this writer wrote last. */
  private last: ChainPosition | null = null;
  /** Whether nobody else seemed to write after `last`: then the one-statement path is tried. */
  private alone = true;
  private queue: Pending[] = [];
  private writing = false;

  constructor(private readonly db: Db) {}

  append(entry: ValidEntry): Promise<AppendedEvidence> {
    return new Promise((resolve, reject) => {
      this.queue.push({ entry, resolve, reject });
      if (!this.writing) void this.drain();
    });
  }

  private async drain() {
    this.writing = true;
    try {
      while (this.queue.length) {
        const batch = this.queue.splice(0, MAX_BATCH);
        try {
          await withConnection(this.db, (client) => this.write(client, batch));
        } catch (err) {
          this.alone = false; // whatever happened, the next write reads the tail under the lock
          for (const p of batch) p.reject(err);
        }
      }
    } finally {
      this.writing = false;
    }
  }

  private async write(client: Client, batch: Pending[]) {
    const todo = await settleRecorded(client, batch);
    if (!todo.length) return;
    if (this.alone && this.last && (await this.tryAfter(client, this.last, todo))) return;
    const done = await underChainLock(client, async (tail) => {
      this.alone = tail.seq === this.last?.seq && tail.hash === this.last.hash;
      // Under the lock nobody else writes: the tail is final and our ids are either in or free.
      const left = await settleRecorded(client, todo);
      const rows = chainAfter(tail, entriesOf(left), new Date().toISOString());
      if (rows.length && (await insertAfter(client, tail, rows)) !== rows.length)
        throw new Error('the evidence chain changed under its lock');
      return { rows, left };
    });
    this.written(done.rows, done.left);
  }

  /** The one-statement path, after this writer's last entry. False when another writer moved on. */
  private async tryAfter(client: Client, tail: ChainPosition, todo: Pending[]): Promise<boolean> {
    const rows = chainAfter(tail, entriesOf(todo), new Date().toISOString());
    try {
      if ((await insertAfter(client, tail, rows)) === rows.length) {
        this.written(rows, todo);
        return true;
      }
    } catch (err) {
      // Our seq, or one of our chosen ids, went to another writer first.
      if (!isUniqueViolation(err)) throw err;
    }
    this.alone = false;
    return false;
  }

  private written(rows: ChainedRow[], pending: Pending[]) {
    const last = rows.at(-1);
    if (last) this.last = last;
    rows.forEach((row, i) => pending[i]!.resolve(appended(row)));
  }
}

const entriesOf = (pending: Pending[]) => pending.map((p) => p.entry);

/**
 * Entries whose chosen id is recorded already get the recorded entry (a retried activity whose
 * first attempt committed); the same id twice in one batch is written once. Returns the rest.
 */
async function settleRecorded(client: Client, batch: Pending[]): Promise<Pending[]> {
  const chosen = batch.filter((p) => p.entry.chosen).map((p) => p.entry.id);
  if (!chosen.length) return batch;
  const recorded = new Map((await readRows(client, 'id = ANY($1::text[])', [chosen])).map((r) => [r.id, r]));
  const first = new Map<string, Pending>();
  const left: Pending[] = [];
  for (const p of batch) {
    const row = recorded.get(p.entry.id);
    const earlier = first.get(p.entry.id);
    if (row) settleWithRecorded(p, row);
    else if (earlier) followEarlier(p, earlier);
    else {
      first.set(p.entry.id, p);
      left.push(p);
    }
  }
  return left;
}

const sameContent = (a: ValidEntry, b: { kind: string; process_id: string | null; payload?: string }) =>
  a.kind === b.kind && a.process_id === b.process_id && a.payload === b.payload;

function settleWithRecorded(p: Pending, row: EntryRow) {
  if (sameContent(p.entry, { ...row, payload: framedPayload(row) })) p.resolve(appended(row));
  else p.reject(new EvidenceConflictError(`evidence ${row.id} already records a different entry`));
}

/** The same id twice in one batch: the second gets the first one's outcome. */
function followEarlier(p: Pending, earlier: Pending) {
  if (!sameContent(p.entry, earlier.entry)) {
    p.reject(new EvidenceConflictError(`evidence ${p.entry.id} was given twice with different content`));
    return;
  }
  const { resolve, reject } = earlier;
  earlier.resolve = (v) => (resolve(v), p.resolve(v));
  earlier.reject = (e) => (reject(e), p.reject(e));
}

const writers = new WeakMap<Db, ChainWriter>();

function writerFor(db: Db): ChainWriter {
  let writer = writers.get(db);
  if (!writer) writers.set(db, (writer = new ChainWriter(db)));
  return writer;
}

// ---------------------------------------------------------------------------------------------
// Verification

async function verifyChain(db: Db): Promise<ChainVerification> {
  // Entries appended while we verify are left for the next run: the answer describes one prefix.
  return withConnection(db, async (client) => verifyEntries(client, (await readTail(client)).seq));
}

export function evidenceStore(db: Db) {
  return {
    /**
     * Appends one entry and resolves once it is committed. It runs in its own short
     * transaction, never inside a caller's: evidence must not vanish with a rollback.
     */
    async append(entry: NewEvidence): Promise<AppendedEvidence> {
      if (db.isTransaction) throw new Error('evidence is appended in its own transaction, not inside one');
      return writerFor(db).append(validateEntry(entry));
    },
    async get(id: string): Promise<EvidenceEntry | undefined> {
      const [row] = await withConnection(db, (c) => readRows(c, 'id = $1', [id]));
      return row && toEntry(row);
    },
    /** The entries of one process (negotiation, transfer, delegation), oldest first. */
    async forProcess(processId: string): Promise<EvidenceEntry[]> {
      const rows = await withConnection(db, (c) => readRows(c, 'process_id = $1', [processId]));
      return rows.map(toEntry);
    },
    /** Recomputes every hash from the stored bytes and checks every link and column, page by page. */
    verify(): Promise<ChainVerification> {
      return verifyChain(db);
    },
  };
}

export type EvidenceStore = ReturnType<typeof evidenceStore>;
