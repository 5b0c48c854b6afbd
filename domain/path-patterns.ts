/**
 * Allowed-path patterns of a backend binding: segments separated by '/', where `*` is exactly
 * one segment and `**` (last only) is the rest; `**` alone is the whole API. The matcher is
 * strict: it refuses `.` and `..` segments, empty segments and encoded slashes or backslashes,
 * so a request cannot walk out of what a pattern allows (gateway.md §5).
 */
export function patternProblem(pattern: string): string | null {
  if (pattern.startsWith('/')) return 'must not start with /';
  const segments = pattern.split('/');
  for (const [i, seg] of segments.entries()) {
    if (seg === '') return 'has an empty segment';
    if (seg === '.' || seg === '..') return 'must not contain . or .. segments';
    if (seg === '**' && i !== segments.length - 1) return '** may only be the last segment';
    if (seg !== '*' && seg !== '**' && seg.includes('*')) return '* and ** must be whole segments';
    if (/%2f|%5c|\\/i.test(seg)) return 'must not contain encoded slashes or backslashes';
  }
  return null;
}

/** Splits a request path into segments, or null when the path is one we refuse outright. */
export function requestSegments(path: string): string[] | null {
  const trimmed = path.replace(/^\/+/, '');
  if (trimmed === '') return [];
  const segments = trimmed.split('/');
  for (const seg of segments) {
    if (seg === '' || seg === '.' || seg === '..') return null;
    if (/%2f|%5c|%2e|\\/i.test(seg)) return null;
  }
  return segments;
}

export function matchesPattern(pattern: string, path: string): boolean {
  const segments = requestSegments(path);
  if (segments === null) return false;
  const parts = pattern.split('/');
  for (let i = 0; i < parts.length; i++) {
    const part = parts[i]!;
    if (part === '**') return segments.length > i;
    const seg = segments[i];
    if (seg === undefined) return false;
    if (part !== '*' && part !== seg) return false;
  }
  return segments.length === parts.length;
}

export const pathAllowed = (patterns: string[], path: string): boolean =>
  patterns.some((p) => matchesPattern(p, path));
