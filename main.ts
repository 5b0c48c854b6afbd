/**
 * The connector process: API and Temporal worker (roles can run apart with CONNECTOR_ROLES).
 * `npm start` (dev/start.ts) starts the embedded stack first and then calls startConnector;
 * in production, `node dist/main.js` runs this file with DATABASE_URL and TEMPORAL_ADDRESS set.
 */
import http from 'node:http';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { pino, type Logger } from 'pino';
import { Client, Connection } from '@temporalio/client';
import type { DataConverter } from '@temporalio/common';
import {
  DefaultLogger,
  NativeConnection,
  Runtime,
  Worker,
  type WorkflowBundleOption,
  bundleWorkflowCode,
} from '@temporalio/worker';
import { createDb, migrateLatest, type Db } from './db/knex.js';
import { createApp, type SurfaceProfile } from './api/app.js';
import type { Services } from './api/services.js';
import { DSP_BASE_PATH } from './domain/dsp.js';
import { DEFAULT_DELIVERY_RETRY } from './domain/outbox.js';
import { createActivities } from './activities/index.js';
import { apiKeyStore } from './db/api-keys.js';
import { createApiKey } from './auth/api-keys.js';
import { loadConfig, ConfigError, PROJECT_ROOT, type Config } from './config.js';
import {
  connectorIdentity,
  connectorTrust,
  loadIdentityKeys,
  type ConnectorIdentity,
  type ConnectorTrust,
} from './auth/identity.js';
import { signingKey } from './auth/keys.js';
import { payloadEncryptionCodec } from './auth/payload-encryption.js';
import { answerSigner } from './gateway/signatures.js';
import { startDataPlaneRuntime, type DataPlaneRuntime } from './gateway/dataplane/runtime.js';

const here = path.dirname(fileURLToPath(import.meta.url));
const version = (
  JSON.parse(fs.readFileSync(path.join(PROJECT_ROOT, 'package.json'), 'utf8')) as { version: string }
).version;

export const WORKFLOWS_PATH = path.join(
  here,
  'workflows',
  `index${path.extname(fileURLToPath(import.meta.url))}`,
);

/**
 * The workflow bundle `npm run build` writes beside the compiled code (dev/bundle-workflows.ts).
 * A compiled connector loads it instead of running webpack at start: about 75 MB less peak
 * memory and 2.5 s less start-up, and the code the worker runs is the code that was built.
 */
export const PREBUILT_WORKFLOW_BUNDLE = path.join(here, 'workflow-bundle.js');

/** The prebuilt bundle when this is the compiled connector and the build wrote one; else null. */
function prebuiltWorkflowBundle(): WorkflowBundleOption | null {
  const compiled = path.extname(fileURLToPath(import.meta.url)) === '.js';
  return compiled && fs.existsSync(PREBUILT_WORKFLOW_BUNDLE) ? { codePath: PREBUILT_WORKFLOW_BUNDLE } : null;
}

/** Bundles the workflow code once (webpack + swc); resolves our `.js` import specifiers to `.ts` sources. */
export async function bundleWorkflows(): Promise<WorkflowBundleOption> {
  const { code } = await bundleWorkflowCode({
    workflowsPath: WORKFLOWS_PATH,
    logger: { trace() {}, debug() {}, info() {}, warn() {}, error: console.error, log() {} },
    webpackConfigHook: (config) => {
      config.resolve = { ...config.resolve, extensionAlias: { '.js': ['.ts', '.js'] } };
      return config;
    },
  });
  return { code };
}

/**
 * The SDK passes failures as `error` (an Error, whose fields JSON does not show: `{}` in the log).
 * pino serializes errors under `err` (type, message, stack, cause), so they are moved there.
 */
function withSerializableErrors(meta: Record<string, unknown> | undefined): Record<string, unknown> {
  if (!meta) return {};
  const { error, failure, ...rest } = meta;
  return {
    ...rest,
    ...(error instanceof Error ? { err: error } : error !== undefined ? { error } : {}),
    ...(failure instanceof Error
      ? { failure: { message: failure.message, type: failure.name } }
      : failure !== undefined
        ? { failure }
        : {}),
  };
}

/** The SDK's own logs go to our logger at warn and above; it can be installed once per process. */
function installTemporalRuntime(logger: Logger) {
  try {
    Runtime.install({
      // We stop the worker ourselves (in order, after the HTTP server); the SDK must not exit on signals.
      shutdownSignals: [],
      logger: new DefaultLogger('WARN', ({ level, message, meta }) => {
        const fields = withSerializableErrors(meta);
        if (level === 'ERROR') logger.error(fields, message);
        else logger.warn(fields, message);
      }),
    });
  } catch {
    // already installed in this process (several connectors in one test run)
  }
}

/**
 * The very first start makes one admin key. Claiming a settings row first makes that happen
 * once even when several connector processes start together on a fresh database.
 */
async function bootstrapAdminKey(db: Db): Promise<string | null> {
  return db.transaction(async (trx) => {
    const claimed = await trx('settings')
      .insert({ key: 'bootstrap.admin_key', value: JSON.stringify({ at: new Date().toISOString() }) })
      .onConflict('key')
      .ignore()
      .returning('key');
    if (claimed.length === 0) return null;
    if ((await apiKeyStore(trx).count()) > 0) return null;
    return (await createApiKey(apiKeyStore(trx), { name: 'initial admin', role: 'admin' })).key;
  });
}

export interface StartOptions {
  databaseUrl: string;
  temporalAddress: string;
  logger?: Logger;
  /** A prebuilt workflow bundle (tests bundle once for the whole run). */
  workflowBundle?: WorkflowBundleOption;
  /** A test profile's additions to the HTTP surface (tck/run.ts passes the DSP TCK's); never in production. */
  profile?: SurfaceProfile;
}

export interface RunningConnector {
  url: string;
  port: number;
  db: Db;
  temporal: Client;
  /** How this connector's payloads are encoded in Temporal (encrypted; replay needs it too). */
  dataConverter: DataConverter;
  /** The admin API key, created on the very first start only. */
  initialAdminKey: string | null;
  /** Our DID, DID document and outbound connector tokens (auth/identity.ts). */
  identity: ConnectorIdentity;
  /** Checks inbound connector tokens (`verifyConnectorToken(token, { ourDid })`). */
  verifyConnectorToken: ConnectorTrust['verifyConnectorToken'];
  /** The authority's member registry (cached); refuses everyone without AUTHORITY_URL. */
  authority: ConnectorTrust['authority'];
  stop(): Promise<void>;
}

export async function startConnector(config: Config, options: StartOptions): Promise<RunningConnector> {
  const logger = options.logger ?? pino({ level: config.logLevel });
  const db = createDb(options.databaseUrl);
  const applied = await migrateLatest(db);
  if (applied.length) logger.info({ migrations: applied }, 'database migrated');
  const { keys, kek } = await loadIdentityKeys(db, config, logger);
  // Every payload our workflows hand to Temporal is encrypted (auth/payload-encryption.ts).
  const dataConverter: DataConverter = { payloadCodecs: [payloadEncryptionCodec(kek)] };
  const trust = connectorTrust(db, config, logger);

  const connection = await Connection.connect({ address: options.temporalAddress });
  const temporal = new Client({ connection, namespace: config.temporal.namespace, dataConverter });

  // First start: no API key exists yet, so make an admin key and hand it out once.
  const initialAdminKey = config.roles.includes('api') ? await bootstrapAdminKey(db) : null;

  // Listen first: with PORT=0 our address, and so our DID, is known only then. Until the app is
  // mounted below, requests are answered 503.
  let server: http.Server | undefined;
  const requestsInFlight = new Set<AbortController>();
  let port = config.port;
  let handleRequest: (req: http.IncomingMessage, res: http.ServerResponse) => unknown = (_req, res) =>
    res.writeHead(503).end();
  if (config.roles.includes('api')) {
    // Temporal calls made while handling a request carry that request's abort signal: stop()
    // aborts the requests still waiting (an Update whose worker is gone) before it closes the
    // connection, so no call is left retrying on a closed channel. One controller per request:
    // the client adds a listener per call and never removes it, so a shared signal would leak.
    // Gateway and data plane requests never call Temporal (nothing in gateway/ imports it) and
    // are the hot path: they skip the scope (an AbortController and an async context each).
    server = http.createServer((req, res) => {
      if (req.url?.startsWith('/gateway/') || req.url?.startsWith('/dataplane/'))
        return void handleRequest(req, res);
      const aborter = new AbortController();
      requestsInFlight.add(aborter);
      void connection
        .withAbortSignal(aborter.signal, () => Promise.resolve(handleRequest(req, res)))
        .finally(() => requestsInFlight.delete(aborter));
    });
    await new Promise<void>((resolve, reject) => {
      server!.once('error', reject);
      server!.listen(config.port, config.host, () => resolve());
    });
    port = (server.address() as { port: number }).port;
  }
  const url = config.publicUrl.replace(/:0(?=$|\/)/, `:${port}`);
  const identity = connectorIdentity(config, url, keys);

  let worker: Worker | undefined;
  let workerRun: Promise<void> | undefined;
  if (config.roles.includes('worker')) {
    installTemporalRuntime(logger);
    const nativeConnection = await NativeConnection.connect({ address: options.temporalAddress });
    const prebuilt = options.workflowBundle ? null : prebuiltWorkflowBundle();
    logger.info(
      options.workflowBundle
        ? 'workflow code: the bundle given by the caller'
        : prebuilt
          ? `workflow code: the build's bundle ${PREBUILT_WORKFLOW_BUNDLE}`
          : 'workflow code: bundled from the sources now',
    );
    worker = await Worker.create({
      connection: nativeConnection,
      namespace: config.temporal.namespace,
      taskQueue: config.temporal.taskQueue,
      dataConverter,
      workflowBundle: options.workflowBundle ?? prebuilt ?? (await bundleWorkflows()),
      activities: createActivities({
        db,
        ...(config.transferTokenTtlMs
          ? { transferTokenTtlSeconds: Math.round(config.transferTokenTtlMs / 1000) }
          : {}),
        allowLoopbackPeers: config.identity.didWebAllowHttp,
        authorize: async (m) => ({
          authorization: `Bearer ${await identity.issueToken(m.counterparty_did)}`,
        }),
      }),
    });
    workerRun = worker.run().finally(() => nativeConnection.close());
    workerRun.catch((err: unknown) => logger.error({ err }, 'worker stopped'));
  }

  // The data plane serves with the API role: lease, request log, signed answers.
  let dataplane: DataPlaneRuntime | undefined;
  if (server) {
    dataplane = await startDataPlaneRuntime({
      db,
      databaseUrl: options.databaseUrl,
      logger,
      leaseTtlMs: config.dataplaneLeaseTtlMs,
      signAnswer: answerSigner({ did: identity.did, key: signingKey(keys) }),
      resolver: trust.resolver,
    });
  }

  if (server) {
    const services: Services = {
      db,
      logger,
      temporal,
      taskQueue: config.temporal.taskQueue,
      version,
      connector: {
        did: identity.did,
        publicUrl: url,
        dspAddress: `${url}${DSP_BASE_PATH}`,
        approvalTimeoutMs: config.approvalDeadlineMs,
        responseTimeoutMs: config.negotiationDeadlineMs,
        allowLoopbackPeers: config.identity.didWebAllowHttp,
        deliveryRetry: DEFAULT_DELIVERY_RETRY,
        transferHistoryLimit: config.transferHistoryLimit,
      },
      authority: trust.authority,
      peerTokens: { issue: (audienceDid) => identity.issueToken(audienceDid) },
    };
    const app = createApp(
      services,
      {
        async ready() {
          const checks: Record<string, string> = {};
          // Details go to the log; the unauthenticated probe answers only what is down.
          try {
            await db.raw('select 1');
            checks.database = 'ok';
          } catch (err) {
            logger.warn({ err }, 'readiness: database');
            checks.database = 'unavailable';
          }
          try {
            await connection.healthService.check({});
            checks.temporal = 'ok';
          } catch (err) {
            logger.warn({ err }, 'readiness: temporal');
            checks.temporal = 'unavailable';
          }
          if (worker)
            checks.worker = worker.getState() === 'RUNNING' ? 'ok' : worker.getState().toLowerCase();
          return { ok: Object.values(checks).every((c) => c === 'ok'), checks };
        },
      },
      { identity, trust, profile: options.profile, dataplane },
    );
    handleRequest = app.callback();
  }

  return {
    url,
    port,
    db,
    temporal,
    dataConverter,
    initialAdminKey,
    identity,
    verifyConnectorToken: trust.verifyConnectorToken,
    authority: trust.authority,
    async stop() {
      if (server) {
        // Finish requests in flight (up to 5 s), then cut what is left.
        const s = server;
        const closed = new Promise<void>((resolve) => s.close(() => resolve()));
        s.closeIdleConnections();
        const force = setTimeout(() => s.closeAllConnections(), 5_000);
        await closed;
        clearTimeout(force);
      }
      // After the server: requests in flight were answered by an active instance.
      await dataplane?.stop();
      if (worker) {
        if (worker.getState() === 'RUNNING') worker.shutdown();
        await workerRun;
      }
      for (const aborter of requestsInFlight) aborter.abort(new Error('the connector is stopping'));
      await connection.close();
      await db.destroy();
    },
  };
}

async function runFromEnvironment() {
  let config: Config;
  try {
    config = loadConfig();
  } catch (err) {
    if (err instanceof ConfigError) {
      console.error(err.message);
      process.exit(2);
    }
    throw err;
  }
  if (!config.databaseUrl || !config.temporal.address) {
    console.error(
      'configuration: DATABASE_URL and TEMPORAL_ADDRESS are required here (npm start runs an embedded stack instead)',
    );
    process.exit(2);
  }
  const connector = await startConnector(config, {
    databaseUrl: config.databaseUrl,
    temporalAddress: config.temporal.address,
  });
  console.log(`connector listening at ${connector.url}`);
  if (connector.initialAdminKey) console.log(`admin API key (shown once): ${connector.initialAdminKey}`);
  let stopping = false;
  const stop = () => {
    if (stopping) return;
    stopping = true;
    void connector.stop().then(() => process.exit(0));
  };
  process.on('SIGINT', stop);
  process.on('SIGTERM', stop);
}

if (process.argv[1] && fileURLToPath(import.meta.url) === path.resolve(process.argv[1])) {
  await runFromEnvironment();
}
