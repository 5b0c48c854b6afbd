/**
 * mocha global fixtures: one embedded PostgreSQL (ephemeral) and one in-memory, headless
 * Temporal dev server for the whole run, and the workflow bundle built once.
 */
import { stack } from './support/stack.js';
import { defaultTestDataDir, startEmbeddedPostgres } from '../dev/postgres.js';
import { resolveTemporalCli, startTemporalDevServer } from '../dev/temporal.js';
import { bundleWorkflows } from '../main.js';

const say = (line: string) => process.stderr.write(`[test stack] ${line}\n`);

export async function mochaGlobalSetup() {
  const started = Date.now();
  const cli = await resolveTemporalCli({ explicit: process.env.TEMPORAL_CLI ?? null, say });
  const [postgres, temporal, workflowBundle] = await Promise.all([
    startEmbeddedPostgres({ dataDir: defaultTestDataDir(), ephemeral: true }),
    startTemporalDevServer({ cli, headless: true }),
    bundleWorkflows(),
  ]);
  Object.assign(stack, { postgres, temporal, workflowBundle });
  say(
    `PostgreSQL on port ${postgres.port}, Temporal at ${temporal.address}, ready in ${Date.now() - started} ms`,
  );
}

export async function mochaGlobalTeardown() {
  await Promise.all([stack.temporal?.stop(), stack.postgres?.stop()]);
}
