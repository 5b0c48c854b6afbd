/**
 * A building's `/points` answer, read and checked (gateway/schemas.ts), with the checked point
 * list of large answers remembered by its text.
 *
 * A point list is metadata: it changes when the building's systems do, not between two calls,
 * while the envelope around it (`generated_at`) changes every time. For a 1 MiB answer the data
 * plane spent most of its CPU on parsing, checking and serialising the same points again
 * (≈ 7 + 3 + 6 ms). So for answers of LARGE_ANSWER_BYTES and more, the data plane keeps, per
 * backend binding and query, the answer's bytes, where its `points` array sits in them, the
 * checked points and their serialisation. The next answer whose `points` text is byte for byte
 * the same is checked by reading only the rest of it:
 *
 *   - the new answer B is split as X + T + Y, where T is the remembered points text (the part
 *     of B before or after T must equal the remembered answer's; a cheap memcmp each);
 *   - E = X + "[]" + Y must be JSON whose top-level `points` member, the only one under that
 *     name, is exactly that "[]". Then B is E with a valid JSON array in place of "[]", so B is
 *     JSON and means E with `points` = T's value (UTF-8 decoding too splits at the ASCII
 *     brackets around T);
 *   - E is checked like any answer (envelope, includes), and the points are T's, checked when T
 *     was first seen. The checks are pure functions of the text, so the result is the same.
 *
 * The answer sent is byte for byte what serialising the checked answer gives, as before.
 */
import type { PointsAnswer, Point } from '../schemas.js';

/** Smaller answers are parsed every time: for them the bookkeeping costs more than it saves. */
export const LARGE_ANSWER_BYTES = 64 * 1024;
/** The remembered answers' bytes and serialised points together (each also holds its points parsed). */
const MAX_REMEMBERED_BYTES = 8 * 1024 * 1024;

export interface CheckedPoints {
  answer: PointsAnswer;
  /** JSON.stringify(answer.points) as bytes, when the answer is remembered. */
  pointsJson?: Buffer;
}

interface Remembered {
  /** Answers in a row, up to this one, whose points differed from the ones remembered before. */
  changes: number;
  body: Buffer;
  /** The `points` array text: body[start, end). */
  start: number;
  end: number;
  points: Point[];
  pointsJson: Buffer;
}

const remembered = new Map<string, Remembered>();
let rememberedBytes = 0;
/**
 * A backend whose point list differs in every answer (a live field beside the spec's, say)
 * would make every answer pay for finding its points text, for nothing. After CHANGES_IN_A_ROW
 * such answers its key rests: the next RESTING_ANSWERS answers are read without remembering.
 */
const CHANGES_IN_A_ROW = 3;
const RESTING_ANSWERS = 50;
const resting = new Map<string, number>();

const sizeOf = (entry: Remembered) => entry.body.length + entry.pointsJson.length;

function remember(key: string, entry: Remembered): void {
  forget(key);
  const size = sizeOf(entry);
  if (size > MAX_REMEMBERED_BYTES) return;
  while (rememberedBytes + size > MAX_REMEMBERED_BYTES) forget(remembered.keys().next().value!);
  remembered.set(key, entry);
  rememberedBytes += size;
}

function forget(key: string): void {
  const old = remembered.get(key);
  if (!old) return;
  remembered.delete(key);
  rememberedBytes -= sizeOf(old);
}

/** Forgets every remembered answer (tests). */
export function forgetCheckedPoints(): void {
  remembered.clear();
  resting.clear();
  rememberedBytes = 0;
}

const QUOTE = 0x22;
const BACKSLASH = 0x5c;
const COLON = 0x3a;
const COMMA = 0x2c;
const OPEN_OBJECT = 0x7b;
const CLOSE_OBJECT = 0x7d;
const OPEN_ARRAY = 0x5b;
const CLOSE_ARRAY = 0x5d;

const isSpace = (c: number | undefined) => c === 0x20 || c === 0x0a || c === 0x0d || c === 0x09;

function skipSpace(b: Uint8Array, i: number): number {
  while (isSpace(b[i])) i++;
  return i;
}

/** Index just past the string whose opening quote is at `i`. */
function skipString(b: Uint8Array, i: number): number {
  const n = b.length;
  for (i++; i < n; i++) {
    const c = b[i];
    if (c === QUOTE) return i + 1;
    if (c === BACKSLASH) i++;
  }
  return n;
}

/** Index just past the value starting at `i` (no leading white space). */
function skipValue(b: Uint8Array, i: number): number {
  const n = b.length;
  let depth = 0;
  while (i < n) {
    const c = b[i]!;
    if (c === QUOTE) {
      i = skipString(b, i);
      if (depth === 0) return i;
    } else if (c === OPEN_OBJECT || c === OPEN_ARRAY) {
      depth++;
      i++;
    } else if (c === CLOSE_OBJECT || c === CLOSE_ARRAY) {
      if (depth === 0) return i; // the end of a number or literal before a closing bracket
      i++;
      if (--depth === 0) return i;
    } else if (depth === 0 && (c === COMMA || isSpace(c))) {
      return i; // the end of a number or literal
    } else i++;
  }
  return n;
}

/**
 * Where the value of the top-level member `name` of a JSON object sits in its text, for text
 * that JSON.parse has accepted (bytes of it: every byte of a multi-byte character is ≥ 0x80, so
 * the structure is the same). Null unless the member is there exactly once under its plain name
 * (a key with an escape could spell it too).
 */
export function memberValueRange(b: Uint8Array, name: string): { start: number; end: number } | null {
  const wanted = Buffer.from(`"${name}"`);
  let i = skipSpace(b, 0);
  if (b[i] !== OPEN_OBJECT) return null;
  i = skipSpace(b, i + 1);
  let found: { start: number; end: number } | null = null;
  while (b[i] === QUOTE) {
    const keyStart = i;
    i = skipString(b, i);
    const key = b.subarray(keyStart, i);
    if (key.includes(BACKSLASH)) return null;
    i = skipSpace(b, i);
    if (b[i] !== COLON) return null;
    i = skipSpace(b, i + 1);
    const start = i;
    i = skipValue(b, i);
    if (wanted.equals(key)) {
      if (found) return null;
      found = { start, end: i };
    }
    i = skipSpace(b, i);
    if (b[i] === COMMA) i = skipSpace(b, i + 1);
  }
  return found;
}

/**
 * Reads a `/points` answer: `parse` turns bytes into JSON (throwing the data plane's refusal),
 * `check` is readPointsAnswer. `keyOf` names the backend binding and query the answer is for
 * (asked for large answers only).
 */
export function readCheckedPoints(
  body: Buffer,
  keyOf: () => string,
  parse: (bytes: Buffer) => unknown,
  check: (parsed: unknown) => PointsAnswer,
): CheckedPoints {
  if (body.length < LARGE_ANSWER_BYTES) return { answer: check(parse(body)) };
  const key = keyOf();
  const rest = resting.get(key);
  if (rest !== undefined) {
    if (rest > 1) resting.set(key, rest - 1);
    else resting.delete(key);
    return { answer: check(parse(body)) };
  }
  const known = remembered.get(key);
  if (known) {
    const answer = recheck(body, known, check);
    if (answer) return { answer, pointsJson: known.pointsJson };
  }
  const parsed = parse(body);
  const answer = check(parsed);
  const changes = known ? known.changes + 1 : 0;
  const range = changes < CHANGES_IN_A_ROW ? memberValueRange(body, 'points') : null;
  if (!range || body[range.start] !== OPEN_ARRAY) {
    forget(key);
    if (changes >= CHANGES_IN_A_ROW) {
      if (resting.size >= 1_000) resting.clear();
      resting.set(key, RESTING_ANSWERS);
    }
    return { answer };
  }
  const pointsJson = Buffer.from(JSON.stringify(answer.points));
  remember(key, { changes, body, ...range, points: answer.points, pointsJson });
  return { answer, pointsJson };
}

/** The answer, when its points text is the remembered one and the rest holds (see the top). */
function recheck(body: Buffer, known: Remembered, check: (parsed: unknown) => PointsAnswer) {
  const length = known.end - known.start;
  const after = known.body.length - known.end;
  let start: number;
  if (body.length >= known.end && known.body.compare(body, 0, known.end, 0, known.end) === 0) {
    start = known.start; // what comes before and the points are unchanged
  } else {
    start = body.length - after - length;
    if (start < 0 || known.body.compare(body, start, body.length, known.start, known.body.length) !== 0)
      return null;
  }
  const end = start + length;
  const rest = Buffer.concat([body.subarray(0, start), Buffer.from('[]'), body.subarray(end)]);
  let parsed: unknown;
  try {
    parsed = JSON.parse(rest.toString('utf8'));
  } catch {
    return null; // B is not what it seems; the full read gives the right refusal
  }
  const range = memberValueRange(rest, 'points');
  if (!range || range.start !== start || range.end !== start + 2) return null;
  const answer = check(parsed);
  return { ...answer, points: known.points };
}

/**
 * The answer's bytes: what JSON.stringify of `{...envelope, points, ...includes}` gives, with
 * the remembered serialisation of the points in the middle when every point is shown. In parts,
 * so that the megabyte in the middle is written as it is rather than copied once more.
 */
export function pointsAnswerParts(
  envelope: { platform_version: string; building_id: string; generated_at: string },
  points: readonly Point[],
  includes: Partial<Pick<PointsAnswer, 'equipment' | 'groups' | 'locations'>>,
  read: CheckedPoints,
): Buffer[] {
  const { platform_version, building_id, generated_at } = envelope;
  if (!read.pointsJson || points.length !== read.answer.points.length)
    return [
      Buffer.from(JSON.stringify({ platform_version, building_id, generated_at, points, ...includes })),
    ];
  const head = JSON.stringify({ platform_version, building_id, generated_at });
  const tail = JSON.stringify(includes);
  return [
    Buffer.from(`${head.slice(0, -1)},"points":`),
    read.pointsJson,
    Buffer.from(tail === '{}' ? '}' : `,${tail.slice(1)}`),
  ];
}
