/**
 * Summarises a V8 CPU profile (`bench/gateway.ts --cpu-prof=<dir>` writes one per connector
 * thread): self time by function and by file or package, so the hot path of the gateway and
 * the data plane can be read without DevTools.
 *
 *   npx tsx bench/gateway-profile.ts <file.cpuprofile> [--top=25] [--last=<seconds>]
 *
 * `--last` keeps only the samples of the profile's last seconds: the gateway run of the last
 * case, without the start-up (module loading, migrations) that otherwise dominates the figures.
 */
import fs from 'node:fs';
import path from 'node:path';
import { pathToFileURL } from 'node:url';

interface ProfileNode {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number };
  children?: number[];
}

interface Profile {
  nodes: ProfileNode[];
  startTime: number;
  endTime: number;
  samples: number[];
  timeDeltas: number[];
}

/** A file's package (`undici`, `knex`, …), our folder (`gateway/router.ts`) or V8's own. */
function where(url: string): string {
  if (!url) return '(native / V8)';
  const p = url.replace(/^file:\/\//, '');
  const nm = p.lastIndexOf('node_modules/');
  if (nm >= 0) {
    const parts = p.slice(nm + 'node_modules/'.length).split('/');
    return parts[0]!.startsWith('@') ? `${parts[0]}/${parts[1]}` : parts[0]!;
  }
  if (p.startsWith('node:')) return p;
  return path.relative(process.cwd(), p) || p;
}

export function summarise(profile: Profile, top = 25, lastSeconds = Infinity): string[] {
  const byId = new Map(profile.nodes.map((n) => [n.id, n]));
  const selfUs = new Map<number, number>();
  const from = profile.endTime - lastSeconds * 1e6;
  let at = profile.startTime;
  profile.samples.forEach((id, i) => {
    at += profile.timeDeltas[i] ?? 0;
    if (at >= from) selfUs.set(id, (selfUs.get(id) ?? 0) + (profile.timeDeltas[i] ?? 0));
  });
  const fn = new Map<string, number>();
  const file = new Map<string, number>();
  let total = 0;
  let idle = 0;
  for (const [id, us] of selfUs) {
    const { functionName, url, lineNumber } = byId.get(id)!.callFrame;
    if (functionName === '(idle)') {
      idle += us;
      continue;
    }
    total += us;
    const key = `${functionName || '(anonymous)'}  ${where(url)}${url ? `:${lineNumber + 1}` : ''}`;
    fn.set(key, (fn.get(key) ?? 0) + us);
    file.set(where(url), (file.get(where(url)) ?? 0) + us);
  }
  // Inclusive time: each sample counts once for every distinct function on its stack.
  const parent = new Map<number, number>();
  for (const n of profile.nodes) for (const c of n.children ?? []) parent.set(c, n.id);
  const keyOf = (n: ProfileNode) =>
    `${n.callFrame.functionName || '(anonymous)'}  ${where(n.callFrame.url)}${n.callFrame.url ? `:${n.callFrame.lineNumber + 1}` : ''}`;
  const inclusive = new Map<string, number>();
  for (const [id, us] of selfUs) {
    if (byId.get(id)!.callFrame.functionName === '(idle)') continue;
    const seen = new Set<string>();
    for (let at: number | undefined = id; at !== undefined; at = parent.get(at))
      seen.add(keyOf(byId.get(at)!));
    for (const k of seen) inclusive.set(k, (inclusive.get(k) ?? 0) + us);
  }
  const lines = [
    `busy ${(total / 1000).toFixed(0)} ms, idle ${(idle / 1000).toFixed(0)} ms over ${(Math.min(profile.endTime - profile.startTime, lastSeconds * 1e6) / 1e6).toFixed(1)} s`,
  ];
  const list = (title: string, m: Map<string, number>) => {
    lines.push('', title);
    for (const [k, us] of [...m].sort((a, b) => b[1] - a[1]).slice(0, top))
      lines.push(`  ${((100 * us) / (total || 1)).toFixed(1).padStart(5)} %  ${k}`);
  };
  list('self time by file or package', file);
  list('self time by function', fn);
  list(
    'inclusive time by function (synchronous stacks only: time after an await counts from there)',
    inclusive,
  );
  return lines;
}

if (import.meta.url === pathToFileURL(path.resolve(process.argv[1] ?? '')).href) {
  const file = process.argv.slice(2).find((a) => !a.startsWith('--'));
  const top = Number(process.argv.find((a) => a.startsWith('--top='))?.split('=')[1] ?? 25);
  const last = Number(process.argv.find((a) => a.startsWith('--last='))?.split('=')[1] ?? Infinity);
  if (!file) {
    process.stderr.write(
      'usage: npx tsx bench/gateway-profile.ts <file.cpuprofile> [--top=25] [--last=<seconds>]\n',
    );
    process.exit(2);
  }
  for (const line of summarise(JSON.parse(fs.readFileSync(file, 'utf8')) as Profile, top, last))
    process.stdout.write(`${line}\n`);
}
