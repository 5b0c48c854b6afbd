/**
 * Runs benchmarks: `npm run bench` runs them all, `npm run bench -- evidence` the ones named.
 * Options after the names (e.g. `--seconds=5`) are passed to each bench.
 */
const BENCHES: Record<string, () => Promise<{ run(args: string[]): Promise<void> }>> = {
  evidence: () => import('./evidence.js'),
  gateway: () => import('./gateway.js'),
  negotiation: () => import('./negotiation.js'),
};

const args = process.argv.slice(2);
const names = args.filter((a) => !a.startsWith('--'));
const options = args.filter((a) => a.startsWith('--'));
const unknown = names.filter((n) => !Object.hasOwn(BENCHES, n));
if (unknown.length) {
  console.error(`unknown bench: ${unknown.join(', ')} (known: ${Object.keys(BENCHES).join(', ')})`);
  process.exit(2);
}
for (const name of names.length ? names : Object.keys(BENCHES)) {
  console.log(`\n== ${name}`);
  await (await BENCHES[name]!()).run(options);
}
