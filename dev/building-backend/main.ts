/**
 * Runs the sample building backend on its own:
 *
 *   PORT=8090 BACKEND_KEY=secret npx tsx dev/building-backend/main.ts
 *
 * PORT defaults to 0 (any free port; the URL is printed). The key from BACKEND_KEY (default
 * demo-backend-key) may use every building, sent in the X-Api-Key header.
 */
import { DEMO_BACKEND_KEY, loadBuildings, startBuildingBackend } from './index.js';

const port = Number(process.env.PORT ?? 0);
const host = process.env.HOST ?? '127.0.0.1';
const key = process.env.BACKEND_KEY ?? DEMO_BACKEND_KEY;
const latencyMs = Number(process.env.BACKEND_LATENCY_MS ?? 0);

const backend = await startBuildingBackend({ keys: { [key]: '*' }, latencyMs }, port, host);
const ids = loadBuildings().buildings.map((b) => b.local_id);
console.log(`sample building backend on ${backend.url}`);
console.log(`  key header X-Api-Key: ${key}`);
for (const id of ids) console.log(`  ${backend.url}/v1/buildings/${id}/points`);

const stop = (): void => {
  void backend.close().then(() => process.exit(0));
};
process.once('SIGINT', stop);
process.once('SIGTERM', stop);
