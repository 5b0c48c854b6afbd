/**
 * The sample building backend in its own process for bench/gateway.ts, so that its CPU is its
 * own and can be read from /proc. Started with `fork` (IPC); environment:
 *   BENCH_BUILDINGS_FILE  the buildings file (bench/gateway-buildings.ts)
 *   BENCH_BACKEND_KEY     the key allowed for every building (X-Api-Key)
 *   BENCH_LATENCIES       comma list of latencies in ms: one server per latency
 * Sends { ready: true, urls: { "<latency>": url } } when listening; exits when the parent goes.
 */
import { startBuildingBackend, type RunningBuildingBackend } from '../dev/building-backend/index.js';

const file = process.env.BENCH_BUILDINGS_FILE;
const key = process.env.BENCH_BACKEND_KEY;
const latencies = (process.env.BENCH_LATENCIES ?? '')
  .split(',')
  .filter((v) => v !== '')
  .map(Number);
if (!file || !key || !process.send || latencies.some((l) => !Number.isInteger(l) || l < 0)) {
  process.stderr.write(
    'gateway-backend: fork me with BENCH_BUILDINGS_FILE, BENCH_BACKEND_KEY, BENCH_LATENCIES\n',
  );
  process.exit(2);
}

const servers: RunningBuildingBackend[] = [];
const urls: Record<string, string> = {};
for (const latencyMs of latencies) {
  const server = await startBuildingBackend({ keys: { [key]: '*' }, latencyMs, buildingsFile: file });
  servers.push(server);
  urls[String(latencyMs)] = server.url;
}
process.send({ ready: true, urls });

const stop = () => void Promise.all(servers.map((s) => s.close())).finally(() => process.exit(0));
process.on('disconnect', stop);
process.on('SIGTERM', stop);
