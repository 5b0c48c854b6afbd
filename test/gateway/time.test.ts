/**
 * RFC 3339 date-times (domain/time.ts): the check the data plane runs on every timestamp of
 * every answer. Fixed cases, and a comparison with the former regex + Date implementation on
 * generated strings, so that the fast check accepts exactly what it accepted.
 */
import { expect } from 'chai';
import { isRfc3339, toRfc3339 } from '../../domain/time.js';

/**
 * The implementation the character scan replaced (regex, then Date objects), with one fix:
 * it took the days of February of the years 0000–0099 from 1900–1999 (Date.UTC maps two-digit
 * years), so it refused 0000-02-29, which exists (and which Date.parse reads).
 */
const REFERENCE = /^(\d{4})-(\d{2})-(\d{2})[Tt](\d{2}):(\d{2}):(\d{2})(\.\d+)?([Zz]|[+-](\d{2}):(\d{2}))$/;
function referenceIsRfc3339(value: string): boolean {
  const m = REFERENCE.exec(value);
  if (!m) return false;
  const [year, month, day, hour, minute, second] = m.slice(1, 7).map(Number) as [
    number,
    number,
    number,
    number,
    number,
    number,
  ];
  if (month < 1 || month > 12 || day < 1 || hour > 23 || minute > 59 || second > 60) return false;
  const lastDay = new Date(0);
  lastDay.setUTCFullYear(year, month, 0);
  if (day > lastDay.getUTCDate()) return false;
  if (m[9] !== undefined && (Number(m[9]) > 23 || Number(m[10]) > 59)) return false;
  return !Number.isNaN(Date.parse(value));
}

describe('RFC 3339 date-times', () => {
  const valid = [
    '2026-01-31T12:00:00Z',
    '2026-01-31t12:00:00z',
    '2026-01-31T12:00:00.5Z',
    '2026-01-31T12:00:00.123456789Z',
    '2026-01-31T12:00:00+02:00',
    '2026-01-31T12:00:00.250-05:30',
    '2026-01-31T00:00:00-00:00',
    '2024-02-29T23:59:59Z',
    '2000-02-29T00:00:00Z',
    '0000-01-01T00:00:00Z',
    '0000-02-29T00:00:00Z',
    '9999-12-31T23:59:59+23:59',
    '2026-04-30T10:00:00Z',
  ];
  const invalid = [
    '',
    '2026-01-31',
    '2026-01-31T12:00Z',
    '2026-01-31T12:00:00',
    '2026-01-31 12:00:00Z',
    '2026-1-31T12:00:00Z',
    '2026-01-31T12:00:00.Z',
    '2026-01-31T12:00:00,5Z',
    '2026-01-31T12:00:00+0200',
    '2026-01-31T12:00:00+2:00',
    '2026-01-31T12:00:00+24:00',
    '2026-01-31T12:00:00+02:60',
    '2026-01-31T12:00:00ZZ',
    '2026-01-31T12:00:00Z ',
    ' 2026-01-31T12:00:00Z',
    '2026-00-10T12:00:00Z',
    '2026-13-10T12:00:00Z',
    '2026-01-00T12:00:00Z',
    '2026-01-32T12:00:00Z',
    '2026-02-29T12:00:00Z',
    '2100-02-29T12:00:00Z',
    '2026-04-31T12:00:00Z',
    '2026-02-30T00:00:00Z',
    '2026-01-31T24:00:00Z',
    '2026-01-31T12:60:00Z',
    // A leap second: Date.parse cannot represent it, so none of our readers could.
    '2026-12-31T23:59:60Z',
    '+02026-01-31T12:00:00Z',
    '２０２６-01-31T12:00:00Z',
    '2026-01-31T12:00:00.１Z',
    '2026-01-31X12:00:00Z',
    '2026/01/31T12:00:00Z',
  ];

  it('accepts full date-times with an offset and any fraction', () => {
    for (const v of valid) expect(isRfc3339(v), v).to.equal(true);
  });

  it('refuses anything else: missing parts, impossible dates and times, bad offsets, extra characters', () => {
    for (const v of invalid) expect(isRfc3339(v), v).to.equal(false);
  });

  it('agrees with the former regex + Date check on the fixed cases and on 200 000 generated strings', () => {
    for (const v of [...valid, ...invalid]) expect(isRfc3339(v), v).to.equal(referenceIsRfc3339(v));
    // Deterministic generator (mulberry32), mutating valid shapes near their boundaries.
    let seed = 0x5eed;
    const random = () => {
      seed = (seed + 0x6d2b79f5) | 0;
      let t = seed;
      t = Math.imul(t ^ (t >>> 15), t | 1);
      t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
      return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
    };
    const pick = <T>(xs: readonly T[]): T => xs[Math.floor(random() * xs.length)]!;
    const two = () => String(Math.floor(random() * 100)).padStart(2, '0');
    const near = (values: number[]) => String(pick(values)).padStart(2, '0');
    const noise = ['', 'Z', 'z', 'T', ':', '.', '-', '+', '0', '9', ' ', 'x', '60', '\u0661'];
    let accepted = 0;
    for (let n = 0; n < 200_000; n++) {
      const year = pick(['2026', '2024', '2000', '2100', '1900', '0000', '9999', '20a6', '226']);
      const month = random() < 0.8 ? near([1, 2, 4, 6, 9, 11, 12]) : pick([two(), '00', '13', '1']);
      const day = random() < 0.8 ? near([1, 28, 29, 30, 31]) : pick([two(), '00', '32', '3']);
      const hour = random() < 0.8 ? near([0, 12, 23]) : pick([two(), '24', '1']);
      const minute = random() < 0.8 ? near([0, 59]) : pick([two(), '60']);
      const second = random() < 0.8 ? near([0, 59]) : pick([two(), '60', '61']);
      const fraction = pick(['', '', '.5', '.123', '.123456789', '.', '.x']);
      const offset = pick(['Z', 'z', '+00:00', '-05:30', '+23:59', '+24:00', '-00:60', '+0100', 'Zz', '']);
      let s = `${year}-${month}-${day}${pick(['T', 't', ' '])}${hour}:${minute}:${second}${fraction}${offset}`;
      if (random() < 0.2) {
        const at = Math.floor(random() * (s.length + 1));
        s = s.slice(0, at) + pick(noise) + s.slice(at + (random() < 0.5 ? 1 : 0));
      }
      const expected = referenceIsRfc3339(s);
      if (expected) accepted++;
      if (isRfc3339(s) !== expected) expect.fail(`${JSON.stringify(s)}: expected ${expected}`);
    }
    // The generator reaches both answers often.
    expect(accepted).to.be.within(5_000, 195_000);
  });

  it('writes UTC with milliseconds', () => {
    expect(toRfc3339(new Date(Date.UTC(2026, 0, 31, 12)))).to.equal('2026-01-31T12:00:00.000Z');
    expect(isRfc3339(toRfc3339(new Date()))).to.equal(true);
  });
});
