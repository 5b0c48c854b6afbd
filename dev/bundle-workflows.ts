/**
 * `npm run build`, last step: bundles the compiled workflow code into dist/workflow-bundle.js,
 * which the compiled connector's worker loads at start (see PREBUILT_WORKFLOW_BUNDLE in main.ts).
 * Run from dist only (`node dist/dev/bundle-workflows.js`): it bundles dist/workflows, the very
 * code this build produced.
 */
import fs from 'node:fs';
import { fileURLToPath } from 'node:url';
import { PREBUILT_WORKFLOW_BUNDLE, bundleWorkflows } from '../main.js';

if (!fileURLToPath(import.meta.url).endsWith('.js')) {
  process.stderr.write('bundle-workflows: run the compiled script (npm run build), not the sources\n');
  process.exit(2);
}
const bundle = await bundleWorkflows();
if (!('code' in bundle)) throw new Error('bundle-workflows: the bundler returned no code');
fs.writeFileSync(PREBUILT_WORKFLOW_BUNDLE, bundle.code);
process.stdout.write(
  `workflow bundle: ${PREBUILT_WORKFLOW_BUNDLE} (${(bundle.code.length / 1024).toFixed(0)} KiB)\n`,
);
