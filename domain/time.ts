/**
 * RFC 3339 date-time (section 5.6): full date, 'T', full time with seconds, optional fraction,
 * and a mandatory offset ('Z' or ±hh:mm). Stricter than ISO 8601 and than Date.parse: the
 * calendar date must exist (no 2026-02-30), and a leap second (`:60`) is refused because
 * Date.parse, and so every reader of ours, cannot represent it. 't' and 'z' may be lower case.
 *
 * A character scan rather than a regex plus Date objects: the data plane checks every
 * timestamp of every answer (thousands per building), and this allocates nothing.
 */
export function isRfc3339(value: string): boolean {
  const n = value.length;
  // Shortest: 2026-01-31T12:00:00Z (20 characters).
  if (n < 20) return false;
  const year = digits(value, 0, 4);
  const month = digits(value, 5, 2);
  const day = digits(value, 8, 2);
  const hour = digits(value, 11, 2);
  const minute = digits(value, 14, 2);
  const second = digits(value, 17, 2);
  if ((year | month | day | hour | minute | second) < 0) return false;
  if (value.charCodeAt(4) !== DASH || value.charCodeAt(7) !== DASH) return false;
  const t = value.charCodeAt(10);
  if (t !== UPPER_T && t !== LOWER_T) return false;
  if (value.charCodeAt(13) !== COLON || value.charCodeAt(16) !== COLON) return false;
  if (month < 1 || month > 12 || day < 1 || day > daysInMonth(year, month)) return false;
  if (hour > 23 || minute > 59 || second > 59) return false;

  let i = 19;
  if (value.charCodeAt(i) === DOT) {
    const start = ++i;
    while (i < n && isDigit(value.charCodeAt(i))) i++;
    if (i === start) return false;
  }
  const offset = value.charCodeAt(i);
  if (offset === UPPER_Z || offset === LOWER_Z) return i + 1 === n;
  if (offset !== PLUS && offset !== DASH) return false;
  if (i + 6 !== n || value.charCodeAt(i + 3) !== COLON) return false;
  const offsetHour = digits(value, i + 1, 2);
  const offsetMinute = digits(value, i + 4, 2);
  return offsetHour >= 0 && offsetHour <= 23 && offsetMinute >= 0 && offsetMinute <= 59;
}

const DASH = 0x2d;
const COLON = 0x3a;
const DOT = 0x2e;
const PLUS = 0x2b;
const UPPER_T = 0x54;
const LOWER_T = 0x74;
const UPPER_Z = 0x5a;
const LOWER_Z = 0x7a;
const ZERO = 0x30;

const isDigit = (c: number) => c >= ZERO && c <= ZERO + 9;

/** The decimal number of `count` ASCII digits at `at`, or -1 when one of them is not a digit. */
function digits(s: string, at: number, count: number): number {
  let v = 0;
  for (let i = at; i < at + count; i++) {
    const d = s.charCodeAt(i) - ZERO;
    if (!(d >= 0 && d <= 9)) return -1; // also NaN, past the end
    v = v * 10 + d;
  }
  return v;
}

function daysInMonth(year: number, month: number): number {
  if (month === 2) return year % 4 === 0 && (year % 100 !== 0 || year % 400 === 0) ? 29 : 28;
  return month === 4 || month === 6 || month === 9 || month === 11 ? 30 : 31;
}

/** Timestamps we answer with: UTC, milliseconds, 'Z'. */
export const toRfc3339 = (date: Date | string): string => new Date(date).toISOString();
