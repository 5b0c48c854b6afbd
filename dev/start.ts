/**
 * `npm start`: the embedded stack (PostgreSQL, Temporal dev server, optionally the sample
 * building backend) and then the connector, all in this process tree. Ctrl-C stops everything;
 * if this process dies, its children die with it (dev/processes.ts).
 */
import fs from 'node:fs';
import path from 'node:path';
import { pino } from 'pino';
import { loadConfig, ConfigError, type Config } from '../config.js';
import { startConnector, type RunningConnector } from '../main.js';
import { ensureDatabase } from '../db/knex.js';
import { startEmbeddedPostgres, type EmbeddedPostgresHandle } from './postgres.js';
import { resolveTemporalCli, startTemporalDevServer, type TemporalDevServer } from './temporal.js';
import { startBuildingBackend, DEMO_BACKEND_KEY } from './building-backend/index.js';
import { portIsFree } from './processes.js';

const say = (line: string) => process.stderr.write(`${line}\n`);

async function main() {
  const started = Date.now();
  let config: Config;
  try {
    // The loopback demo: connectors on this machine resolve each other's did:web over http.
    config = loadConfig({ DID_WEB_ALLOW_HTTP: 'true', ...process.env });
  } catch (err) {
    if (err instanceof ConfigError) {
      say(err.message);
      process.exit(2);
    }
    throw err;
  }
  fs.mkdirSync(config.dataDir, { recursive: true });
  const logger = pino(
    { level: config.logLevel },
    pino.destination({ dest: path.join(config.dataDir, 'connector.log'), sync: false }),
  );
  const stops: Array<() => Promise<void>> = [];
  let stopping = false;
  const stopAll = async (code: number) => {
    if (stopping) return;
    stopping = true;
    say('stopping…');
    for (const stop of stops.reverse())
      await stop().catch((err: unknown) => say(`while stopping: ${String(err)}`));
    process.exit(code);
  };
  // `on`, not `once`: Ctrl-C reaches us both directly and relayed by npm/tsx, and a second
  // signal must not kill the process before its children are stopped.
  process.on('SIGINT', () => void stopAll(0));
  process.on('SIGTERM', () => void stopAll(0));

  try {
    let databaseUrl = config.databaseUrl;
    if (!databaseUrl) {
      say('starting PostgreSQL…');
      const pg: EmbeddedPostgresHandle = await startEmbeddedPostgres({ dataDir: config.dataDir, log: say });
      stops.push(() => pg.stop());
      await ensureDatabase(pg.adminUrl, 'connector');
      databaseUrl = pg.urlFor('connector');
    }

    let temporalAddress = config.temporal.address;
    let temporalUi: string | null = null;
    if (!temporalAddress) {
      const cli = await resolveTemporalCli({ explicit: config.temporal.cli, say });
      say('starting the Temporal dev server…');
      const temporal: TemporalDevServer = await startTemporalDevServer({
        cli,
        dbFile: path.join(config.dataDir, 'temporal', 'temporal.db'),
        port: config.temporal.port,
        uiPort: config.temporal.uiPort,
        namespace: config.temporal.namespace,
        logFile: path.join(config.dataDir, 'temporal', 'temporal.log'),
      });
      stops.push(() => temporal.stop());
      temporalAddress = temporal.address;
      temporalUi = temporal.uiUrl;
    }

    let backendUrl: string | null = null;
    if (config.demoBackend) {
      // A stable port, so that a source registered against it keeps working after a restart.
      const port = (await portIsFree(config.demoBackendPort)) ? config.demoBackendPort : 0;
      if (port === 0 && config.demoBackendPort !== 0) {
        say(`port ${config.demoBackendPort} is taken; the sample backend gets a free port`);
      }
      const backend = await startBuildingBackend({ keys: { [DEMO_BACKEND_KEY]: '*' } }, port);
      stops.push(() => backend.close());
      backendUrl = backend.url;
    }

    say('starting the connector…');
    const connector: RunningConnector = await startConnector(config, {
      databaseUrl,
      temporalAddress,
      logger,
    });
    stops.push(() => connector.stop());

    const lines = [
      '',
      `Connector ready in ${((Date.now() - started) / 1000).toFixed(1)} s`,
      `  Connector:        ${connector.url}   (management API ${connector.url}/api/v1, OpenAPI ${connector.url}/api/v1/openapi.json)`,
      temporalUi ? `  Temporal UI:      ${temporalUi}` : `  Temporal:         ${temporalAddress} (external)`,
      backendUrl ? `  Sample backend:   ${backendUrl}   (header X-Api-Key: ${DEMO_BACKEND_KEY})` : null,
      `  Data directory:   ${config.dataDir}   (logs: connector.log)`,
      connector.initialAdminKey
        ? `  Admin API key:    ${connector.initialAdminKey}\n                    shown this once: keep it (Authorization: Bearer <key>)`
        : '  Admin API key:    created on the first start (create more with POST /api/v1/api-keys)',
      '',
      'Press Ctrl-C to stop.',
    ];
    process.stdout.write(lines.filter((l) => l !== null).join('\n') + '\n');
  } catch (err) {
    say(`start failed: ${err instanceof Error ? err.message : String(err)}`);
    await stopAll(1);
  }
}

await main();
