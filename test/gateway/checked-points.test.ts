/**
 * Large `/points` answers whose point list was checked before (gateway/dataplane/checked-points.ts):
 * an answer read with the remembered points must be exactly what reading it afresh gives (the
 * same answer, or the same refusal), however the bytes around and inside the points change,
 * and the bytes sent must be what serialising the checked answer gives.
 */
import { expect } from 'chai';
import { ShapeError, readPointsAnswer } from '../../gateway/schemas.js';
import {
  LARGE_ANSWER_BYTES,
  forgetCheckedPoints,
  memberValueRange,
  pointsAnswerParts,
  readCheckedPoints,
  type CheckedPoints,
} from '../../gateway/dataplane/checked-points.js';

class NotJson extends Error {}
const parse = (bytes: Buffer): unknown => {
  try {
    return JSON.parse(bytes.toString('utf8'));
  } catch {
    throw new NotJson('not JSON');
  }
};

/** A deterministic generator, so that a failure can be replayed. */
function random(seed: number) {
  let s = seed >>> 0;
  return (n: number) => {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    return s % n;
  };
}

function point(i: number) {
  return {
    point_id: `p${i}`,
    name: `Point ${i} – zone ${i % 7}`,
    class: i % 3 ? 'brick:Temperature_Sensor' : 'brick:Occupancy_Command',
    access: i % 3 ? 'read' : 'read_write',
    value_type: i % 3 ? 'number' : 'integer',
    is_cumulative: false,
    unit: 'unit:DEG_C',
    constraints: { min: -10.5, max: 40, step: 0.5, minimum_interval: 'PT10S' },
    equipment_id: `eq${i % 11}`,
    location_id: 'building_1',
    metadata_modified_at: '2026-07-14T19:19:11Z',
  };
}

const POINTS = Array.from({ length: 500 }, (_, i) => point(i));
const answer = (generatedAt: string, points: unknown[] = POINTS, extra: object = {}) =>
  Buffer.from(JSON.stringify({ platform_version: '1.0', generated_at: generatedAt, points, ...extra }));

/** The outcome of reading `body` with the remembered points, or afresh. */
function outcome(read: () => CheckedPoints): { answer: unknown } | { refused: string } {
  try {
    return { answer: read().answer };
  } catch (err) {
    if (err instanceof ShapeError || err instanceof NotJson) return { refused: err.message };
    throw err;
  }
}
const bytes = (...args: Parameters<typeof pointsAnswerParts>) => Buffer.concat(pointsAnswerParts(...args));
const afresh = (body: Buffer) => outcome(() => ({ answer: readPointsAnswer(parse(body)) }));

describe('checked points of large answers', () => {
  beforeEach(() => forgetCheckedPoints());

  it('reuses the checked points when only the envelope changed, and sends the same bytes', () => {
    const first = answer('2026-01-01T00:00:00Z');
    expect(first.length).to.be.greaterThan(LARGE_ANSWER_BYTES);
    const a = readCheckedPoints(first, () => 'k', parse, readPointsAnswer);
    const second = answer('2026-01-01T00:00:01.5Z');
    const b = readCheckedPoints(second, () => 'k', parse, readPointsAnswer);
    expect(b.answer.points).to.equal(a.answer.points); // the remembered list itself
    expect(b.answer.generated_at).to.equal('2026-01-01T00:00:01.5Z');
    expect(b.answer).to.deep.equal(readPointsAnswer(parse(second)));
    const envelope = { platform_version: '1.0', building_id: 'b1', generated_at: b.answer.generated_at };
    const expected = JSON.stringify({ ...envelope, points: b.answer.points, equipment: [] });
    expect(bytes(envelope, b.answer.points, { equipment: [] }, b).toString()).to.equal(expected);
    // Only some points shown: serialised as before.
    const some = b.answer.points.slice(1);
    expect(bytes(envelope, some, {}, b).toString()).to.equal(JSON.stringify({ ...envelope, points: some }));
  });

  it('reads afresh when the points changed, and small answers always', () => {
    const a = readCheckedPoints(answer('2026-01-01T00:00:00Z'), () => 'k', parse, readPointsAnswer);
    const changed = POINTS.map((p, i) => (i === 250 ? { ...p, name: 'renamed' } : p));
    const b = readCheckedPoints(answer('2026-01-01T00:00:00Z', changed), () => 'k', parse, readPointsAnswer);
    expect(b.answer.points).not.to.equal(a.answer.points);
    expect(b.answer.points[250]!.name).to.equal('renamed');
    const small = answer('2026-01-01T00:00:00Z', POINTS.slice(0, 3));
    const c = readCheckedPoints(small, () => 's', parse, readPointsAnswer);
    expect(c.pointsJson).to.equal(undefined);
  });

  it('stops remembering for a while when the points differ in every answer', () => {
    const changing = (n: number) =>
      answer(
        '2026-01-01T00:00:00Z',
        POINTS.map((p, i) => (i === 0 ? { ...p, name: `n${n}` } : p)),
      );
    const reads = Array.from({ length: 54 }, (_, n) =>
      readCheckedPoints(changing(n), () => 'k', parse, readPointsAnswer),
    );
    // Remembered (and so serialised) for the first answers, then read plainly while resting.
    expect(reads.slice(0, 3).every((r) => r.pointsJson)).to.equal(true);
    expect(reads.slice(4, 53).some((r) => r.pointsJson)).to.equal(false);
    expect(reads.every((r, n) => r.answer.points[0]!.name === `n${n}`)).to.equal(true);
    // Afterwards an unchanged list is remembered again.
    const again = changing(99);
    const after = Array.from({ length: 2 }, () =>
      readCheckedPoints(again, () => 'k', parse, readPointsAnswer),
    );
    expect(after[1]!.answer.points).to.equal(after[0]!.answer.points);
  });

  it('never takes the remembered points for a second points member, one inside another value, or broken JSON', () => {
    const prefixed = Buffer.from(
      `{"points":${JSON.stringify(POINTS)},"platform_version":"1.0","generated_at":"2026-01-01T00:00:00Z"}`,
    );
    readCheckedPoints(prefixed, () => 'k', parse, readPointsAnswer);
    const points = JSON.stringify(POINTS);
    const bad = JSON.stringify([{ ...POINTS[0], value_type: 'float' }]);
    const cases = [
      // A later "points" wins in JSON.parse: it must be the one checked.
      `{"points":${points},"points":${bad},"platform_version":"1.0","generated_at":"2026-01-01T00:00:00Z"}`,
      `{"points":${points},"platform_version":"1.0","generated_at":"2026-01-01T00:00:00Z","points":${bad}}`,
      `{"points":${points},"platform_version":"1.0","generated_at":"2026-01-01T00:00:00Z","p\\u006fints":${bad}}`,
      `{"points":${points},"platform_version":"1.0","generated_at":"2026-01-01T00:00:00Z",}`,
      `{"points":${points},"platform_version":"2.0","generated_at":"2026-01-01T00:00:00Z"}`,
      `{"points":${points}}`,
    ];
    for (const text of cases) {
      const body = Buffer.from(text);
      expect(
        outcome(() => readCheckedPoints(body, () => 'k', parse, readPointsAnswer)),
        text.slice(-120),
      ).to.deep.equal(afresh(body));
    }
    // The remembered text inside another member, the real points elsewhere.
    const suffixed = answer('2026-01-01T00:00:00Z');
    forgetCheckedPoints();
    readCheckedPoints(suffixed, () => 'k', parse, readPointsAnswer);
    const nested = Buffer.from(
      `{"platform_version":"1.0","generated_at":"2026-01-01T00:00:00Z","points":${bad},"x":{"points":${points}}`,
    );
    expect(outcome(() => readCheckedPoints(nested, () => 'k', parse, readPointsAnswer))).to.deep.equal(
      afresh(nested),
    );
  });

  it('gives what a fresh read gives for hundreds of altered answers', () => {
    const next = random(20261122);
    const pick = <T>(list: readonly T[]): T => list[next(list.length)]!;
    const points = JSON.stringify(POINTS);
    const head = '{"platform_version":"1.0","generated_at":"2026-01-01T00:00:00Z","points":';
    const tail = ',"groups":[{"group_id":"g","equipment_ids":["eq1"]}]}';
    const base = Buffer.from(head + points + tail);
    // Members (good, bad, and ones that try to pass for the points) and layouts around them.
    const members = [
      '"platform_version":"1.0"',
      '"platform_version":"1.7"',
      '"platform_version":"2.0"',
      '"generated_at":"2026-01-01T00:00:01.25Z"',
      '"generated_at":"2026-02-30T00:00:00Z"',
      '"points":[]',
      '"p\\u006fints":[]',
      '"points":[{"point_id":""}]',
      '"x":{"points":[1]}',
      '"x":"\\"points\\":"',
      '"x":[1,-0.5e3,true,null]',
      '"groups":[{"group_id":"g","equipment_ids":[]}]',
      '"groups":[{"group_id":""}]',
    ];
    const space = () => pick(['', '', ' ', '\n\t']);
    const list = (n: number) => Array.from({ length: n }, () => space() + pick(members) + space());
    const bytes = (...parts: string[]) => Buffer.from(parts.join(''));
    let reused = 0;
    for (let round = 0; round < 400; round++) {
      forgetCheckedPoints();
      const remembered = readCheckedPoints(base, () => 'k', parse, readPointsAnswer).answer.points;
      let body: Buffer;
      const kind = next(4);
      if (kind === 0) {
        // What comes before the points changes: their text is found from the end.
        const key = pick(['"points":', '"points" :', '"x":', '"p\\u006fints":', '"points":[', '']);
        body = bytes(
          pick(['{', '[', '{"x":{']),
          [...list(next(4)), ''].join(','),
          space(),
          key,
          points,
          tail,
        );
      } else if (kind === 1) {
        // What comes after them changes.
        const end = pick(['}', '}', ',}', ']', '}}', '} ', '}x']);
        const more = list(next(4));
        body = bytes(head, points, more.length ? `,${more.join(',')}` : '', end);
      } else {
        // A few bytes changed anywhere, invalid UTF-8 among them.
        body = Buffer.from(base);
        for (let edits = 1 + next(2); edits > 0; edits--) {
          const where = [next(100), body.length - 1 - next(60), next(body.length)][next(3)]!;
          body[where] = next(8) === 0 ? 0xff : pick([...Buffer.from('{}[]",:\\ 0123456789.-eEtnx')]);
        }
      }
      const read = outcome(() => readCheckedPoints(body, () => 'k', parse, readPointsAnswer));
      expect(
        read,
        `round ${round}: ${body.subarray(0, 150).toString()} … ${body.subarray(-150).toString()}`,
      ).to.deep.equal(afresh(body));
      if ('answer' in read && (read.answer as { points: unknown }).points === remembered) reused++;
    }
    expect(reused).to.be.greaterThan(20);
  });

  it('finds a top-level member in any JSON layout, and nothing where a name is escaped or repeated', () => {
    const range = (text: string) => {
      const r = memberValueRange(Buffer.from(text), 'points');
      return r && text.slice(r.start, r.end);
    };
    expect(range('{"points":[1,2]}')).to.equal('[1,2]');
    expect(
      range(
        ' { "a" : 1 , "b":true,"c":null, "d" :"p\\"oints", "e":{"points":[]},\n"points" :\t[ {"x":"]"} ] }',
      ),
    ).to.equal('[ {"x":"]"} ]');
    expect(range('{"a":-1.5e3,"points":"x"}')).to.equal('"x"');
    expect(range('{"a":[]}')).to.equal(null);
    expect(range('{"points":[],"points":[]}')).to.equal(null);
    expect(range('{"p\\u006fints":[],"points":[]}')).to.equal(null);
    expect(range('[]')).to.equal(null);
  });
});
