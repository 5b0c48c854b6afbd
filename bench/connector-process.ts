/**
 * One connector as its own process, for bench/negotiation.ts (so that its memory can be read
 * from /proc): configuration from the environment as in production (DATABASE_URL,
 * TEMPORAL_ADDRESS, PORT, PUBLIC_URL, TEMPORAL_TASK_QUEUE, AUTHORITY_URL, KEY_ENCRYPTION_KEY,
 * DID_WEB_ALLOW_HTTP, LOG_LEVEL …). BENCH_WORKFLOW_BUNDLE names a prebuilt workflow bundle;
 * without it the connector bundles its workflows itself, as `node dist/main.js` does.
 *
 * Prints one JSON line on stdout when ready: { ready, pid, url, did, adminKey }, and one
 * { memory } line on each SIGUSR2 (process.memoryUsage(), and `liveHeap`: the heap used after a full
 * collection, which that signal runs). Logs go to stderr. SIGTERM or
 * SIGINT stops it in order (HTTP server, worker, connections).
 */
import v8 from 'node:v8';
import vm from 'node:vm';
import { pino } from 'pino';
import { loadConfig } from '../config.js';
import { startConnector } from '../main.js';

const config = loadConfig();
if (!config.databaseUrl || !config.temporal.address) {
  process.stderr.write('connector-process: DATABASE_URL and TEMPORAL_ADDRESS are required\n');
  process.exit(2);
}
const bundlePath = process.env.BENCH_WORKFLOW_BUNDLE;
const connector = await startConnector(config, {
  databaseUrl: config.databaseUrl,
  temporalAddress: config.temporal.address,
  logger: pino({ level: config.logLevel }, pino.destination(2)),
  ...(bundlePath ? { workflowBundle: { codePath: bundlePath } } : {}),
});
process.stdout.write(
  `${JSON.stringify({
    ready: true,
    pid: process.pid,
    url: connector.url,
    did: connector.identity.did,
    adminKey: connector.initialAdminKey,
  })}\n`,
);

// The heap as it is, and what is left of it after a full collection: garbage that V8 has not
// collected yet counts in the first and the RSS, only what is still referenced in the second.
v8.setFlagsFromString('--expose-gc');
const collectGarbage = vm.runInNewContext('gc') as () => void;
process.on('SIGUSR2', () => {
  const memory = process.memoryUsage();
  collectGarbage();
  const liveHeap = process.memoryUsage().heapUsed;
  process.stdout.write(`${JSON.stringify({ memory: { ...memory, liveHeap } })}\n`);
});

let stopping = false;
const stop = () => {
  if (stopping) return;
  stopping = true;
  void connector.stop().then(
    () => process.exit(0),
    (err: unknown) => {
      process.stderr.write(`connector-process: stop failed: ${String(err)}\n`);
      process.exit(1);
    },
  );
};
process.on('SIGTERM', stop);
process.on('SIGINT', stop);
