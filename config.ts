/**
 * Configuration from environment variables, validated at start-up: a bad value stops the
 * connector with a message naming the variable. Every variable is documented in the README.
 */
import Joi from 'joi';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseDurationMs } from './domain/duration.js';

export const PROJECT_ROOT = path.dirname(fileURLToPath(import.meta.url)).replace(/[\\/]dist$/, '');

/**
 * Node flags of the production connector (`npm run serve`, the Dockerfile's CMD; the benches run
 * connectors with them too). V8's young generation grows up to three 16 MiB semi-spaces per
 * isolate (the main one and the workflow thread's), which under load is most of the difference
 * between an idle and a busy connector's resident memory; 4 MiB semi-spaces keep a connector
 * under 250 MB for a few percent more CPU in allocation-heavy paths (README, Configuration).
 */
export const PRODUCTION_NODE_FLAGS = ['--max-semi-space-size=4'] as const;

/**
 * Environment of the production connector, beside PRODUCTION_NODE_FLAGS. glibc gives each thread
 * that allocates its own malloc arena (the connector has the workflow thread, libuv's pool and the
 * Temporal core's threads); two arenas cost nothing measurable here and 15–20 MB less memory.
 */
export const PRODUCTION_ENV = { MALLOC_ARENA_MAX: '2' } as const;

export const CONNECTOR_ROLES = ['api', 'worker'] as const;
export type ConnectorRole = (typeof CONNECTOR_ROLES)[number];

export interface Config {
  port: number;
  host: string;
  publicUrl: string;
  dataDir: string;
  databaseUrl: string | null;
  temporal: {
    address: string | null;
    namespace: string;
    taskQueue: string;
    cli: string | null;
    port: number | null;
    uiPort: number | null;
  };
  roles: ConnectorRole[];
  logLevel: string;
  demoBackend: boolean;
  demoBackendPort: number;
  /** APPROVAL_DEADLINE: how long a contract request waits for an operator's approval. */
  approvalDeadlineMs: number;
  /** NEGOTIATION_DEADLINE: how long a negotiation waits for the counterparty's next message. */
  negotiationDeadlineMs: number;
  /** TRANSFER_TOKEN_TTL: lifetime of a transfer's pull token; null: the data plane's default. */
  transferTokenTtlMs: number | null;
  /** DATAPLANE_LEASE_TTL: how long the active data plane instance's lease lasts unrenewed. */
  dataplaneLeaseTtlMs: number;
  /** TRANSFER_HISTORY_LIMIT: events after which a transfer's workflow continues as new; null: Temporal's suggestion. */
  transferHistoryLimit: number | null;
  identity: {
    /** CONNECTOR_DID; null: derived from PUBLIC_URL (auth/did.ts). */
    did: string | null;
    /** KEY_ENCRYPTION_KEY, base64 of 32 bytes; null: the key file DATA_DIR/keys/kek. */
    keyEncryptionKey: string | null;
    /** DID_WEB_ALLOW_HTTP: loopback did:web DIDs (with a port) resolve over http; for local demos and tests. */
    didWebAllowHttp: boolean;
  };
  /** AUTHORITY_URL: the data-space authority's member registry; null: nobody is a member. */
  authorityUrl: string | null;
}

const schema = Joi.object({
  PORT: Joi.number().integer().min(0).max(65535).default(8080),
  HOST: Joi.string().default('127.0.0.1'),
  PUBLIC_URL: Joi.string().uri({ scheme: ['http', 'https'] }),
  DATA_DIR: Joi.string().default(path.join(PROJECT_ROOT, 'data')),
  DATABASE_URL: Joi.string().uri({ scheme: ['postgres', 'postgresql'] }),
  TEMPORAL_ADDRESS: Joi.string()
    .pattern(/^[^\s:]+:\d+$/)
    .message('"TEMPORAL_ADDRESS" must be host:port'),
  TEMPORAL_NAMESPACE: Joi.string().default('default'),
  TEMPORAL_TASK_QUEUE: Joi.string().default('connector'),
  TEMPORAL_CLI: Joi.string(),
  TEMPORAL_PORT: Joi.number().integer().min(1).max(65535),
  TEMPORAL_UI_PORT: Joi.number().integer().min(1).max(65535),
  CONNECTOR_ROLES: Joi.string()
    .pattern(new RegExp(`^(${CONNECTOR_ROLES.join('|')})(,(${CONNECTOR_ROLES.join('|')}))*$`))
    .message(`"CONNECTOR_ROLES" must be a comma list of ${CONNECTOR_ROLES.join(', ')}`)
    .default(CONNECTOR_ROLES.join(',')),
  LOG_LEVEL: Joi.string().valid('fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent').default('info'),
  DEMO_BACKEND: Joi.boolean().truthy('1').falsy('0').default(true),
  DEMO_BACKEND_PORT: Joi.number().integer().min(0).max(65535).default(8090),
  APPROVAL_DEADLINE: Joi.string()
    .custom((v: string, h) => (parseDurationMs(v) ? v : h.error('any.invalid')))
    .message('"APPROVAL_DEADLINE" must be an ISO 8601 duration with W, D, H, M, S (e.g. P2D, PT30M)')
    .default('P2D'),
  NEGOTIATION_DEADLINE: Joi.string()
    .custom((v: string, h) => (parseDurationMs(v) ? v : h.error('any.invalid')))
    .message('"NEGOTIATION_DEADLINE" must be an ISO 8601 duration with W, D, H, M, S (e.g. P7D, PT1H)')
    .default('P7D'),
  TRANSFER_TOKEN_TTL: Joi.string()
    .custom((v: string, h) => ((parseDurationMs(v) ?? 0) >= 1000 ? v : h.error('any.invalid')))
    .message('"TRANSFER_TOKEN_TTL" must be an ISO 8601 duration of at least a second (e.g. PT10M)'),
  TRANSFER_HISTORY_LIMIT: Joi.number().integer().min(20).max(50_000),
  DATAPLANE_LEASE_TTL: Joi.string()
    .custom((v: string, h) => ((parseDurationMs(v) ?? 0) >= 1000 ? v : h.error('any.invalid')))
    .message('"DATAPLANE_LEASE_TTL" must be an ISO 8601 duration of at least a second (e.g. PT10S)')
    .default('PT10S'),
  CONNECTOR_DID: Joi.string()
    .pattern(/^did:web:[^\s/?#]+$/)
    .message('"CONNECTOR_DID" must be a did:web DID'),
  KEY_ENCRYPTION_KEY: Joi.string()
    .pattern(/^[A-Za-z0-9+/]{43}=?$/)
    .message('"KEY_ENCRYPTION_KEY" must be 32 bytes in base64 (e.g. openssl rand -base64 32)'),
  AUTHORITY_URL: Joi.string().uri({ scheme: ['http', 'https'] }),
  DID_WEB_ALLOW_HTTP: Joi.boolean().truthy('1').falsy('0').default(false),
}).unknown(true);

export class ConfigError extends Error {
  override name = 'ConfigError';
}

export function loadConfig(env: NodeJS.ProcessEnv = process.env): Config {
  // Empty variables count as unset, as a shell user expects from `FOO= npm start`.
  const given = Object.fromEntries(Object.entries(env).filter(([, v]) => v !== ''));
  const { error, value } = schema.validate(given, { abortEarly: true, errors: { wrap: { label: '"' } } });
  if (error) throw new ConfigError(`configuration: ${error.message}`);
  // eslint-disable-next-line @typescript-eslint/no-explicit-any -- joi has validated and defaulted every field above
  const v = value as Record<string, any>;
  return {
    port: v.PORT,
    host: v.HOST,
    publicUrl: (v.PUBLIC_URL ?? `http://localhost:${v.PORT}`).replace(/\/+$/, ''),
    dataDir: path.resolve(v.DATA_DIR),
    databaseUrl: v.DATABASE_URL ?? null,
    temporal: {
      address: v.TEMPORAL_ADDRESS ?? null,
      namespace: v.TEMPORAL_NAMESPACE,
      taskQueue: v.TEMPORAL_TASK_QUEUE,
      cli: v.TEMPORAL_CLI ?? null,
      port: v.TEMPORAL_PORT ?? null,
      uiPort: v.TEMPORAL_UI_PORT ?? null,
    },
    roles: [...new Set(String(v.CONNECTOR_ROLES).split(','))] as ConnectorRole[],
    logLevel: v.LOG_LEVEL,
    demoBackend: v.DEMO_BACKEND,
    demoBackendPort: v.DEMO_BACKEND_PORT,
    approvalDeadlineMs: parseDurationMs(v.APPROVAL_DEADLINE)!,
    negotiationDeadlineMs: parseDurationMs(v.NEGOTIATION_DEADLINE)!,
    transferTokenTtlMs: v.TRANSFER_TOKEN_TTL ? parseDurationMs(v.TRANSFER_TOKEN_TTL)! : null,
    dataplaneLeaseTtlMs: parseDurationMs(v.DATAPLANE_LEASE_TTL)!,
    transferHistoryLimit: v.TRANSFER_HISTORY_LIMIT ?? null,
    identity: {
      did: v.CONNECTOR_DID ?? null,
      keyEncryptionKey: v.KEY_ENCRYPTION_KEY ?? null,
      didWebAllowHttp: v.DID_WEB_ALLOW_HTTP,
    },
    authorityUrl: v.AUTHORITY_URL ? String(v.AUTHORITY_URL).replace(/\/+$/, '') : null,
  };
}
