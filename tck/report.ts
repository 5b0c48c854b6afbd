/**
 * The TCK's results, read from the JUnit XML reports the console launcher writes: one entry per
 * test with its TCK id (`CN:01-03`), group (`CN`), outcome and, for a failure, the reason.
 */
export const GROUPS = ['MET', 'CAT', 'CN', 'CN_C', 'TP', 'TP_C'] as const;
export type Group = (typeof GROUPS)[number];

export interface TckResult {
  id: string;
  group: string;
  title: string;
  outcome: 'passed' | 'failed' | 'skipped';
  /** First line of the failure, for a failed test. */
  reason: string | null;
  /** The whole failure text (message and stack), for the log. */
  detail: string | null;
  seconds: number;
}

const ENTITIES: Record<string, string> = { lt: '<', gt: '>', amp: '&', quot: '"', apos: "'" };

function decode(text: string): string {
  return text.replace(/&(#x[0-9a-f]+|#\d+|[a-z]+);/gi, (whole, name: string) => {
    if (name.startsWith('#x') || name.startsWith('#X'))
      return String.fromCodePoint(parseInt(name.slice(2), 16));
    if (name.startsWith('#')) return String.fromCodePoint(parseInt(name.slice(1), 10));
    return ENTITIES[name] ?? whole;
  });
}

function attributes(tag: string): Record<string, string> {
  const out: Record<string, string> = {};
  for (const m of tag.matchAll(/([\w:-]+)="([^"]*)"/g)) out[m[1]!] = decode(m[2]!);
  return out;
}

/** Text content: CDATA as is, the rest entity-decoded. */
function textOf(inner: string): string {
  return inner
    .split(/(<!\[CDATA\[[\s\S]*?\]\]>)/)
    .map((part) => (part.startsWith('<![CDATA[') ? part.slice(9, -3) : decode(part)))
    .join('');
}

function element(body: string, name: string): { attrs: Record<string, string>; text: string } | null {
  const m = new RegExp(`<${name}(\\s[^>]*?)?(/>|>([\\s\\S]*?)</${name}>)`).exec(body);
  if (!m) return null;
  return { attrs: attributes(m[1] ?? ''), text: textOf(m[3] ?? '') };
}

/** `CN:01-03: Verify …` → id `CN:01-03`, group `CN`, title `Verify …`. */
export function splitDisplayName(displayName: string): { id: string; group: string; title: string } {
  const m = /^([A-Z][A-Z_]*):(\d{2}-\d{2}):?\s*(.*)$/.exec(displayName.trim());
  if (!m) return { id: displayName.trim(), group: 'OTHER', title: '' };
  return { id: `${m[1]}:${m[2]}`, group: m[1]!, title: m[3]! };
}

export function parseJunitXml(xml: string): TckResult[] {
  const results: TckResult[] = [];
  for (const m of xml.matchAll(/<testcase(\s[^>]*?)(\/>|>([\s\S]*?)<\/testcase>)/g)) {
    const attrs = attributes(m[1]!);
    const body = m[3] ?? '';
    const out = element(body, 'system-out')?.text ?? '';
    const displayName = /^display-name: (.*)$/m.exec(out)?.[1] ?? `${attrs.classname}.${attrs.name}`;
    const { id, group, title } = splitDisplayName(displayName);
    const failure = element(body, 'failure') ?? element(body, 'error');
    const skipped = element(body, 'skipped');
    const detail = failure ? [failure.attrs.message, failure.text].filter(Boolean).join('\n') : null;
    results.push({
      id,
      group,
      title,
      outcome: failure ? 'failed' : skipped ? 'skipped' : 'passed',
      reason: failure ? (failure.attrs.message || failure.text).split('\n')[0]!.trim() : null,
      detail,
      seconds: Number(attrs.time ?? 0),
    });
  }
  return results;
}

export interface Summary {
  passed: number;
  failed: number;
  skipped: number;
  byGroup: Array<{ group: string; passed: number; failed: number; skipped: number }>;
}

export function summarize(results: TckResult[]): Summary {
  const count = (rs: TckResult[], o: TckResult['outcome']) => rs.filter((r) => r.outcome === o).length;
  const groups = [
    ...GROUPS,
    ...new Set(results.map((r) => r.group).filter((g) => !(GROUPS as readonly string[]).includes(g))),
  ];
  return {
    passed: count(results, 'passed'),
    failed: count(results, 'failed'),
    skipped: count(results, 'skipped'),
    byGroup: groups
      .map((group) => {
        const rs = results.filter((r) => r.group === group);
        return {
          group,
          passed: count(rs, 'passed'),
          failed: count(rs, 'failed'),
          skipped: count(rs, 'skipped'),
        };
      })
      .filter((g) => g.passed + g.failed + g.skipped > 0),
  };
}

const order = (a: TckResult, b: TckResult) => {
  const ga = GROUPS.indexOf(a.group as Group);
  const gb = GROUPS.indexOf(b.group as Group);
  return ga !== gb ? (ga < 0 ? 99 : ga) - (gb < 0 ? 99 : gb) : a.id.localeCompare(b.id);
};

/** The lines `npm run tck` prints: one per test, one per group, and the closing count. */
export function formatReport(results: TckResult[]): string[] {
  const lines: string[] = [];
  for (const r of [...results].sort(order)) {
    const mark = r.outcome === 'passed' ? 'PASS' : r.outcome === 'failed' ? 'FAIL' : 'SKIP';
    lines.push(`${mark}  ${r.id.padEnd(10)} ${r.title}`);
    if (r.reason) lines.push(`      ${r.reason}`);
  }
  const s = summarize(results);
  lines.push('');
  for (const g of s.byGroup) {
    lines.push(
      `${g.group.padEnd(5)} ${g.passed} passed, ${g.failed} failed${g.skipped ? `, ${g.skipped} skipped (disabled in the TCK)` : ''}`,
    );
  }
  lines.push('');
  lines.push(`TCK result: ${s.passed} passed, ${s.failed} failed, ${s.skipped} skipped`);
  return lines;
}
