/**
 * The shared test stack: one embedded PostgreSQL and one in-memory Temporal dev server for the
 * whole run (started by test/global-setup.ts), and connectors started on them per suite, each
 * with its own database and task queue.
 */
import { randomBytes } from 'node:crypto';
import { pino } from 'pino';
import type { WorkflowBundleOption } from '@temporalio/worker';
import { ensureDatabase } from '../../db/knex.js';
import { loadConfig } from '../../config.js';
import { startConnector, type RunningConnector } from '../../main.js';
import type { EmbeddedPostgresHandle } from '../../dev/postgres.js';
import type { TemporalDevServer } from '../../dev/temporal.js';

export const stack: {
  postgres?: EmbeddedPostgresHandle;
  temporal?: TemporalDevServer;
  workflowBundle?: WorkflowBundleOption;
} = {};

export function requireStack() {
  if (!stack.postgres || !stack.temporal || !stack.workflowBundle)
    throw new Error('the test stack is not running (test/global-setup.ts)');
  return stack as Required<typeof stack>;
}

/** Encrypts test connectors' private keys, so that tests never write a key file into ./data. */
export const TEST_KEY_ENCRYPTION_KEY = randomBytes(32).toString('base64');

export const uniqueName = (prefix: string) => `${prefix}_${randomBytes(4).toString('hex')}`;

export async function createTestDatabase(prefix = 'test'): Promise<string> {
  const { postgres } = requireStack();
  const name = uniqueName(prefix).toLowerCase();
  await ensureDatabase(postgres.adminUrl, name);
  return postgres.urlFor(name);
}

export interface TestConnector extends RunningConnector {
  adminKey: string;
  taskQueue: string;
  databaseUrl: string;
}

export async function startTestConnector(
  options: {
    name?: string;
    env?: Record<string, string>;
    /** Start again on the state of an earlier connector (same database, task queue and admin key). */
    restartOf?: TestConnector;
  } = {},
): Promise<TestConnector> {
  const { temporal, workflowBundle } = requireStack();
  const name = options.name ?? 'connector';
  const databaseUrl = options.restartOf?.databaseUrl ?? (await createTestDatabase(name));
  const taskQueue = options.restartOf?.taskQueue ?? uniqueName(`tq_${name}`);
  const config = loadConfig({
    PORT: '0',
    TEMPORAL_TASK_QUEUE: taskQueue,
    LOG_LEVEL: 'silent',
    DEMO_BACKEND: '0',
    KEY_ENCRYPTION_KEY: TEST_KEY_ENCRYPTION_KEY,
    ...options.env,
  });
  const connector = await startConnector(config, {
    databaseUrl,
    temporalAddress: temporal.address,
    workflowBundle,
    logger: pino({ level: process.env.TEST_LOG_LEVEL ?? 'silent' }),
  });
  const adminKey = options.restartOf?.adminKey ?? connector.initialAdminKey;
  if (!adminKey) throw new Error('a fresh test database must yield an initial admin key');
  return { ...connector, adminKey, taskQueue, databaseUrl };
}
