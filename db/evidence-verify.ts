/**
 * Verification of the evidence chain (docs/evidence.md "Verification"), at the speed of reading it.
 *
 * The rows come as PostgreSQL's binary COPY stream: every column as its raw bytes behind a length,
 * nothing escaped, nothing decoded into strings or row objects by the driver. Each entry is
 * checked on those bytes as they arrive: SHA-256 recomputed over the stored canonical bytes, the
 * link to the entry before, and the columns against the head and tail of the canonical form
 * (envelopeHead / envelopeTail in evidence.ts), compared byte by byte in place. Memory stays
 * flat: each chunk read from the socket is checked before the next one is read, so nothing queues
 * up in the process (the socket's buffer lets the server run ahead meanwhile), and a row lives
 * only while it is checked.
 */
import { isUtf8 } from 'node:buffer';
import { hash as digest } from 'node:crypto';
import type pg from 'pg';

/** Spec "Chain verification". Anchoring is not built yet, so last_anchor is always null. */
export interface ChainVerification {
  ok: boolean;
  entries: number;
  head: string | null;
  head_seq: number | null;
  first_broken_seq: number | null;
  last_anchor: null;
}

/**
 * Rows per COPY statement. Each page is its own short statement and snapshot (a long COPY would
 * hold back vacuum for the whole run); the rows of a page are streamed, so this bounds time, not
 * memory.
 */
export const VERIFY_PAGE_SIZE = 20_000;

export const GENESIS_HASH = '0'.repeat(64);

// ---------------------------------------------------------------------------------------------
// Binary COPY (https://www.postgresql.org/docs/current/sql-copy.html, "Binary Format"): an
// 11-byte signature, flags and a header extension, then per tuple an int16 field count and per
// field an int32 length (-1: NULL) and that many bytes; an int16 -1 ends the data.

const SIGNATURE = Buffer.from('PGCOPY\n\xff\r\n\0', 'latin1');
const HEADER_BYTES = SIGNATURE.length + 8;

/** The columns verification reads, in this order. */
const COLUMNS = 'seq, id, kind, process_id, at, prev_hash, hash, canonical';
const FIELDS = 8;
/** Where a column's bounds are in a row's bounds array. */
const [SEQ, ID, KIND, PROCESS_ID, AT, PREV_HASH, HASH, CANONICAL] = [0, 2, 4, 6, 8, 10, 12, 14] as const;

/**
 * Splits a binary COPY stream into tuples. For each it calls `onRow` with the buffer holding it
 * and the fields' bounds, [start, end) at 2i and 2i+1 (-1 for NULL); the buffer is only valid
 * during the call. Chunks may split a tuple anywhere: the unfinished rest is kept and parsing
 * resumes once enough bytes are there, so a large entry is copied once, not once per chunk.
 */
class BinaryCopyReader {
  private readonly bounds = new Int32Array(FIELDS * 2);
  private pending: Buffer[] = [];
  private pendingBytes = 0;
  /** Bytes the unfinished rest needs at least before it is worth parsing again. */
  private need = 0;
  private started = false;
  private ended = false;

  constructor(private readonly onRow: (buf: Buffer, bounds: Int32Array) => void) {}

  /** Consumes `buf[start, end)`, which may be reused once this returns: what is kept is copied. */
  push(buf: Buffer, start: number, end: number): void {
    if (!this.pendingBytes) {
      const used = this.parse(buf, start, end);
      if (used < end) this.keep(Buffer.from(buf.subarray(used, end)));
      return;
    }
    this.keep(Buffer.from(buf.subarray(start, end)));
    if (this.pendingBytes < this.need) return;
    const joined = Buffer.concat(this.pending, this.pendingBytes);
    this.pending = [];
    this.pendingBytes = 0;
    const used = this.parse(joined, 0, joined.length);
    if (used < joined.length) this.keep(joined.subarray(used));
  }

  finish(): void {
    if (!this.ended || this.pendingBytes) throw new Error('binary COPY: the stream ended inside a row');
  }

  /** Where parsing stopped: after the header and every complete tuple in `buf[start, end)`. */
  private parse(buf: Buffer, start: number, end: number): number {
    let pos = start;
    if (!this.started) {
      if (end - pos < HEADER_BYTES) return this.wait(pos, HEADER_BYTES);
      if (!holds(buf, pos, SIGNATURE, 0, SIGNATURE.length)) throw new Error('binary COPY: no signature');
      const extension = int32(buf, pos + SIGNATURE.length + 4);
      if (extension < 0 || end - pos < HEADER_BYTES + extension)
        return this.wait(pos, HEADER_BYTES + extension);
      pos += HEADER_BYTES + extension;
      this.started = true;
    }
    const b = this.bounds;
    while (!this.ended) {
      if (end - pos < 2) return this.wait(pos, 2);
      const count = (buf[pos]! << 8) | buf[pos + 1]!;
      if (count === 0xffff) {
        this.ended = true;
        pos += 2;
        break;
      }
      if (count !== FIELDS) throw new Error(`binary COPY: a tuple of ${count} fields, expected ${FIELDS}`);
      let p = pos + 2;
      for (let f = 0; f < FIELDS * 2; f += 2) {
        if (end - p < 4) return this.wait(pos, p + 4 - pos);
        const length = int32(buf, p);
        p += 4;
        if (length < 0) {
          b[f] = b[f + 1] = -1;
          continue;
        }
        if (end - p < length) return this.wait(pos, p + length - pos);
        b[f] = p;
        b[f + 1] = p += length;
      }
      this.onRow(buf, b);
      pos = p;
    }
    if (pos < end) throw new Error('binary COPY: data after the end');
    return pos;
  }

  private keep(rest: Buffer) {
    this.pending.push(rest);
    this.pendingBytes += rest.length;
  }

  private wait(pos: number, bytes: number): number {
    this.need = bytes;
    return pos;
  }
}

const COPY_DATA = 0x64; // 'd'
/** The CopyOutResponse ('H') of COLUMNS in binary: length 23, format 1, FIELDS columns of format 1. */
const COPY_OUT_BINARY = (() => {
  const message = Buffer.alloc(1 + 4 + 1 + 2 + 2 * FIELDS);
  message[0] = 0x48;
  message.writeInt32BE(message.length - 1, 1);
  message[5] = 1;
  message.writeInt16BE(FIELDS, 6);
  for (let f = 0; f < FIELDS; f++) message.writeInt16BE(1, 8 + 2 * f);
  return message;
})();

/**
 * `COPY … TO STDOUT` as a pg Submittable (the extension point pg-cursor and pg-query-stream use).
 * While rows stream it reads the connection's socket itself, as pg-copy-streams does: a CopyData
 * message is a 5-byte header and one row (PostgreSQL sends one per row), checked right in the
 * socket's buffer, where pg would build a message object and an event for each (a fifth of the
 * verifier's time). At CopyDone, an error or any other message it hands the socket and the bytes
 * from there back to pg's parser, which ends the query as usual (further CopyData then arrives
 * through handleCopyData). Each chunk is consumed before the next is read, so nothing queues up.
 *
 * On a server error mid-stream (statement cancelled or timed out, backend terminated) the
 * ErrorResponse is such a message: pg parses it and calls handleError, and the ReadyForQuery
 * after it (if the backend lives on) puts the connection back in step before pg sends anything
 * else; a lost socket reaches handleError through pg too. So `done` fails and the connection is
 * either usable or, being dead, destroyed by the pool (knex's `__knex__disposed`): never handed out
 * half-read. What this relies on in pg (8.23) and the tests that catch a change: docs/decisions/0007.
 */
class CopyOut implements pg.Submittable {
  readonly done: Promise<void>;
  private settle!: (failure?: Error) => void;
  private failure: Error | undefined;
  private settled = false;
  private socket: { stream: pg.Connection['stream']; pgData: (chunk: Buffer) => void } | undefined;
  /** A message split across socket chunks, and the bytes it needs at least. */
  private partial: Buffer[] = [];
  private partialBytes = 0;
  private partialNeed = 0;
  /** Whether our CopyOutResponse was read: from then on only CopyData is ours. */
  private copying = false;

  constructor(
    private readonly text: string,
    private readonly onData: (buf: Buffer, start: number, end: number) => void,
  ) {
    this.done = new Promise<void>((resolve, reject) => {
      this.settle = (failure) => {
        this.settled = true;
        if (failure) reject(failure);
        else resolve();
      };
    });
  }

  submit(connection: pg.Connection): void {
    const { stream } = connection;
    const listeners = stream.listeners('data');
    // pg's protocol parser is the socket's one reader; else leave everything to pg
    if (listeners.length === 1) {
      this.socket = { stream, pgData: listeners[0] as (chunk: Buffer) => void };
      stream.removeListener('data', this.socket.pgData);
      stream.on('data', this.fromSocket);
    }
    connection.query(this.text);
  }

  handleCopyData(message: { chunk: Buffer }): void {
    this.data(message.chunk, 0, message.chunk.length);
  }

  handleCommandComplete(): void {}

  handleReadyForQuery(): void {
    this.settle(this.failure);
  }

  /** A server error (then no ReadyForQuery reaches us) or a lost connection. */
  handleError(error: Error): void {
    this.handBack(Buffer.alloc(0));
    this.settle(error);
  }

  private readonly fromSocket = (chunk: Buffer): void => {
    let buf = chunk;
    if (this.partialBytes) {
      this.partial.push(chunk);
      this.partialBytes += chunk.length;
      if (this.partialBytes < this.partialNeed) return;
      buf = Buffer.concat(this.partial, this.partialBytes);
      this.partial = [];
      this.partialBytes = 0;
    }
    let pos = 0;
    while (buf.length - pos >= 5) {
      const code = buf[pos]!;
      const size = 1 + int32(buf, pos + 1);
      // The stream must open with exactly our CopyOutResponse: anything else (an error, or bytes
      // that do not begin a message because pg's parser held part of one) is pg's to read.
      const expected = this.copying ? code === COPY_DATA && size >= 5 : size === COPY_OUT_BINARY.length;
      if (!expected) {
        this.handBack(buf.subarray(pos));
        return;
      }
      if (buf.length - pos < size) break;
      if (this.copying) this.data(buf, pos + 5, pos + size);
      else if (holds(buf, pos, COPY_OUT_BINARY, 0, size)) this.copying = true;
      else {
        this.handBack(buf.subarray(pos));
        return;
      }
      pos += size;
    }
    if (pos < buf.length) {
      this.partial.push(buf.subarray(pos)); // socket chunks are never reused
      this.partialBytes = buf.length - pos;
      this.partialNeed = this.partialBytes >= 5 ? 1 + int32(buf, pos + 1) : 5;
    }
  };

  private handBack(rest: Buffer) {
    if (!this.socket) return;
    const { stream, pgData } = this.socket;
    this.socket = undefined;
    stream.removeListener('data', this.fromSocket);
    stream.on('data', pgData);
    const pending = Buffer.concat([...this.partial, rest]);
    this.partial = [];
    this.partialBytes = 0;
    if (pending.length) pgData(pending);
  }

  private data(buf: Buffer, start: number, end: number) {
    // After a failure, or once the caller was answered (a client-side error such as pg's
    // query_timeout, while the server still streams), the rest is only drained.
    if (this.failure || this.settled) return;
    try {
      this.onData(buf, start, end);
    } catch (error) {
      // Thrown into pg's parser or the socket's event it would break the connection: kept for the end.
      this.failure = error instanceof Error ? error : new Error(String(error));
    }
  }
}

/** Runs `sql` (a `COPY (…) TO STDOUT (FORMAT binary)` of COLUMNS) and hands each row to `onRow`. */
async function copyRows(client: pg.Client, sql: string, onRow: (buf: Buffer, bounds: Int32Array) => void) {
  const reader = new BinaryCopyReader(onRow);
  const copy = new CopyOut(sql, (buf, start, end) => reader.push(buf, start, end));
  client.query(copy);
  await copy.done;
  reader.finish();
}

// ---------------------------------------------------------------------------------------------
// Byte comparisons for the framing check. `after…` return the position after the matched bytes,
// `before…` the position where they begin, else -1; -1 stays -1, so a check is one chain of
// calls. Plain loops: for runs this short they beat a native compare's call.

const bytes = (text: string) => Buffer.from(text, 'utf8');
const AT_KEY = bytes('{"at":"');
const ID_KEY = bytes('","id":');
const KIND_KEY = bytes(',"kind":');
const PAYLOAD_KEY = bytes(',"payload":');
const PREV_HASH_KEY = bytes(',"prev_hash":"');
const PROCESS_ID_KEY = bytes('","process_id":');
const SEQ_KEY = bytes(',"seq":');
const CLOSE = bytes('}');
const NULL = bytes('null');
const QUOTE = 0x22;

/** Whether `buf` holds `src[s, e)` at `pos`. */
function holds(buf: Buffer, pos: number, src: Buffer, s: number, e: number): boolean {
  for (let i = s; i < e; i++, pos++) if (buf[pos] !== src[i]) return false;
  return true;
}

function after(buf: Buffer, pos: number, limit: number, src: Buffer, s: number, e: number): number {
  return pos >= 0 && pos + e - s <= limit && holds(buf, pos, src, s, e) ? pos + e - s : -1;
}

function before(buf: Buffer, end: number, limit: number, src: Buffer, s: number, e: number): number {
  const pos = end - (e - s);
  return end >= 0 && pos >= limit && holds(buf, pos, src, s, e) ? pos : -1;
}

const afterKey = (buf: Buffer, pos: number, limit: number, key: Buffer) =>
  after(buf, pos, limit, key, 0, key.length);
const beforeKey = (buf: Buffer, end: number, limit: number, key: Buffer) =>
  before(buf, end, limit, key, 0, key.length);

/** JSON.stringify leaves a string as it is, quoted, unless it holds `"`, `\` or a control character. */
const plainInJson = (c: number) => c >= 0x20 && c !== 0x22 && c !== 0x5c;

/**
 * The text field `[s, e)` (UTF-8; s -1 for NULL) as JSON.stringify writes it, at `pos`. The
 * common case, a string with nothing to escape, is compared in one pass; anything else (or a
 * mismatch) takes the general way.
 */
function afterJson(buf: Buffer, pos: number, limit: number, s: number, e: number): number {
  if (pos < 0) return -1;
  if (s < 0) return afterKey(buf, pos, limit, NULL);
  const end = pos + (e - s) + 2;
  if (end > limit || buf[pos] !== QUOTE || buf[end - 1] !== QUOTE) return afterEscaped(buf, pos, limit, s, e);
  for (let i = s, p = pos + 1; i < e; i++, p++) {
    const c = buf[i]!;
    if (c !== buf[p] || !plainInJson(c)) return afterEscaped(buf, pos, limit, s, e);
  }
  return end;
}

function beforeJson(buf: Buffer, end: number, limit: number, s: number, e: number): number {
  if (end < 0) return -1;
  if (s < 0) return beforeKey(buf, end, limit, NULL);
  const pos = end - (e - s) - 2;
  if (pos < limit || buf[pos] !== QUOTE || buf[end - 1] !== QUOTE)
    return beforeEscaped(buf, end, limit, s, e);
  for (let i = s, p = pos + 1; i < e; i++, p++) {
    const c = buf[i]!;
    if (c !== buf[p] || !plainInJson(c)) return beforeEscaped(buf, end, limit, s, e);
  }
  return pos;
}

const escaped = (buf: Buffer, s: number, e: number) => bytes(JSON.stringify(buf.toString('utf8', s, e)));

function afterEscaped(buf: Buffer, pos: number, limit: number, s: number, e: number): number {
  return afterKey(buf, pos, limit, escaped(buf, s, e));
}

function beforeEscaped(buf: Buffer, end: number, limit: number, s: number, e: number): number {
  return beforeKey(buf, end, limit, escaped(buf, s, e));
}

/** The decimal digits of `n` (> 0) ending at `end`, as `${n}` writes them. */
function beforeDecimal(buf: Buffer, end: number, limit: number, n: number): number {
  let pos = end;
  for (let v = n; pos >= 0 && v > 0; v = Math.floor(v / 10))
    pos = pos > limit && buf[pos - 1] === 0x30 + (v % 10) ? pos - 1 : -1;
  return n > 0 ? pos : -1;
}

/** `text` (ASCII) at `pos`. */
function afterAscii(buf: Buffer, pos: number, limit: number, text: string): number {
  if (pos < 0 || pos + text.length > limit) return -1;
  for (let i = 0; i < text.length; i++) if (buf[pos + i] !== text.charCodeAt(i)) return -1;
  return pos + text.length;
}

/** A signed int32 (plain arithmetic: Buffer#readInt32BE's checks cost more than the read). */
const int32 = (buf: Buffer, p: number) =>
  (buf[p]! << 24) | (buf[p + 1]! << 16) | (buf[p + 2]! << 8) | buf[p + 3]!;

/** A signed int8 field; exact for |value| < 2^53 (every seq, and microseconds until the year 2285). */
const int8 = (buf: Buffer, s: number) => buf.readInt32BE(s) * 2 ** 32 + buf.readUInt32BE(s + 4);

/** PostgreSQL's timestamp epoch (2000-01-01) in Unix milliseconds. */
const PG_EPOCH_MS = 946_684_800_000;

/**
 * `at` as the canonical form writes it (Date#toISOString), from the binary timestamptz
 * (microseconds since 2000-01-01 UTC); null when it is not a whole millisecond (an `at` moved by
 * less than one must not pass for the one that was hashed) or beyond Date's range.
 */
function isoOfTimestamp(buf: Buffer, s: number): string | null {
  const high = buf.readInt32BE(s);
  const low = buf.readUInt32BE(s + 4);
  // the value mod 1000 without losing precision: 2^32 ≡ 296 (mod 1000)
  const subMillis = ((((high % 1000) + 1000) % 1000) * 296 + (low % 1000)) % 1000;
  if (subMillis !== 0) return null;
  const millis =
    Math.abs(high) < 2 ** 20 ? (high * 2 ** 32 + low) / 1000 : Number(buf.readBigInt64BE(s) / 1000n); // beyond 2^52 µs
  const date = new Date(millis + PG_EPOCH_MS);
  return Number.isNaN(date.getTime()) ? null : date.toISOString();
}

/** Copies `src[s, e)` into `dst` (a loop: cheaper than Buffer#copy's call for a few dozen bytes). */
function copyInto(dst: Buffer, src: Buffer, s: number, e: number) {
  for (let i = s, j = 0; i < e; i++, j++) dst[j] = src[i]!;
}

// ---------------------------------------------------------------------------------------------
// The chain

/**
 * Checks rows in seq order against the row before (genesis: seq 0, 64 zeros) and keeps what the
 * answer needs. After the first break nothing more is checked, only counted.
 */
class ChainCheck {
  entries = 0;
  seq = 0;
  firstBroken: number | null = null;
  /** The stored hash of the row before, copied (the row's buffer is reused); null if NULL. */
  private hash: Buffer | null = bytes(GENESIS_HASH);
  private hashLength = 64;
  /** Entries appended together share `at`: its text is formatted once (zero: 2000-01-01). */
  private readonly atKey = Buffer.alloc(8);
  private atText: string | null = new Date(PG_EPOCH_MS).toISOString();

  readonly row = (buf: Buffer, b: Int32Array): void => {
    const seq = int8(buf, b[SEQ]!);
    if (this.firstBroken === null) {
      if (seq !== this.seq + 1)
        this.firstBroken = this.seq + 1; // an entry is missing
      else if (!this.intact(buf, b, seq)) this.firstBroken = seq;
    }
    this.remember(buf, b[HASH]!, b[HASH + 1]!);
    this.seq = seq;
    this.entries++;
  };

  head(): string | null {
    return this.entries && this.hash ? this.hash.toString('utf8', 0, this.hashLength) : null;
  }

  /** Whether the row links to the one before, its hash is its bytes' and its columns frame them. */
  private intact(buf: Buffer, b: Int32Array, seq: number): boolean {
    const prevHash = b[PREV_HASH]!;
    const hash = b[HASH]!;
    const canonical = b[CANONICAL]!;
    // reordered, inserted, or the one before replaced
    if (!this.hash || prevHash < 0 || b[PREV_HASH + 1]! - prevHash !== this.hashLength) return false;
    if (!holds(buf, prevHash, this.hash, 0, this.hashLength)) return false;
    // bytes or hash altered (bytes that are not UTF-8 were never written by us)
    if (canonical < 0 || hash < 0) return false;
    const stored = buf.subarray(canonical, b[CANONICAL + 1]);
    if (!isUtf8(stored)) return false;
    if (afterAscii(buf, hash, b[HASH + 1]!, digest('sha256', stored, 'hex')) !== b[HASH + 1]!) return false;
    return this.framed(buf, b, seq); // else a column disagrees with the hashed bytes
  }

  /**
   * Whether the canonical bytes are exactly envelopeHead(row) + payload + envelopeTail(row):
   * `{"at":…,"id":…,"kind":…,"payload":` … `,"prev_hash":…,"process_id":…,"seq":…}`.
   */
  private framed(buf: Buffer, b: Int32Array, seq: number): boolean {
    const cs = b[CANONICAL]!;
    const ce = b[CANONICAL + 1]!;
    const at = b[AT]! >= 0 && b[AT + 1]! - b[AT]! === 8 ? this.atOf(buf, b[AT]!) : null;
    if (at === null) return false;
    let start = afterKey(buf, cs, ce, AT_KEY);
    start = afterAscii(buf, start, ce, at);
    start = afterKey(buf, start, ce, ID_KEY);
    start = afterJson(buf, start, ce, b[ID]!, b[ID + 1]!);
    start = afterKey(buf, start, ce, KIND_KEY);
    start = afterJson(buf, start, ce, b[KIND]!, b[KIND + 1]!);
    start = afterKey(buf, start, ce, PAYLOAD_KEY);
    if (start < 0) return false;
    let end = beforeKey(buf, ce, start, CLOSE);
    end = beforeDecimal(buf, end, start, seq);
    end = beforeKey(buf, end, start, SEQ_KEY);
    end = beforeJson(buf, end, start, b[PROCESS_ID]!, b[PROCESS_ID + 1]!);
    end = beforeKey(buf, end, start, PROCESS_ID_KEY);
    // envelopeTail writes prev_hash as it is (hex), between quotes
    end = before(buf, end, start, buf, b[PREV_HASH]!, b[PREV_HASH + 1]!);
    end = beforeKey(buf, end, start, PREV_HASH_KEY);
    return end >= start;
  }

  private atOf(buf: Buffer, s: number): string | null {
    if (!holds(buf, s, this.atKey, 0, 8)) {
      copyInto(this.atKey, buf, s, s + 8);
      this.atText = isoOfTimestamp(buf, s);
    }
    return this.atText;
  }

  private remember(buf: Buffer, s: number, e: number) {
    if (s < 0) {
      this.hash = null;
      return;
    }
    if (!this.hash || this.hash.length < e - s) this.hash = Buffer.alloc(Math.max(64, e - s));
    copyInto(this.hash, buf, s, e);
    this.hashLength = e - s;
  }
}

/**
 * Verification could not finish: the server ended the statement (cancelled, timed out, the
 * backend terminated), the connection was lost, or the stream was not what we asked for. Says
 * nothing about the chain; the server's error, with its SQLSTATE `code`, is the `cause`. It has
 * no `code` of its own on purpose: the API's error boundary reads a class 22 code as a caller's
 * bad value (400), and this is never one.
 */
export class VerificationFailed extends Error {
  override name = 'VerificationFailed';
  constructor(
    /** The last seq read before the failure (0: none). */
    readonly afterSeq: number,
    cause: unknown,
  ) {
    super(
      `evidence verification failed after seq ${afterSeq}: ${(cause as Error)?.message ?? String(cause)}`,
      {
        cause,
      },
    );
  }
}

/**
 * Verifies the entries with seq up to `upTo` (the tail when verification began: entries appended
 * meanwhile are for the next run), streaming keyset pages in seq order on `client`.
 */
export async function verifyEntries(client: pg.Client, upTo: number): Promise<ChainVerification> {
  if (!Number.isSafeInteger(upTo)) throw new Error(`verify: ${upTo} is not a seq`);
  const check = new ChainCheck();
  for (;;) {
    const counted = check.entries;
    try {
      // COPY takes no parameters; both bounds are integers we read ourselves.
      await copyRows(
        client,
        `COPY (SELECT ${COLUMNS} FROM evidence WHERE seq > ${check.seq} AND seq <= ${upTo}
               ORDER BY seq LIMIT ${VERIFY_PAGE_SIZE}) TO STDOUT (FORMAT binary)`,
        check.row,
      );
    } catch (error) {
      throw new VerificationFailed(check.seq, error);
    }
    if (check.entries - counted < VERIFY_PAGE_SIZE) break;
  }
  return {
    ok: check.firstBroken === null,
    entries: check.entries,
    head: check.head(),
    head_seq: check.entries ? check.seq : null,
    first_broken_seq: check.firstBroken,
    last_anchor: null,
  };
}
