/**
 * What the data plane and the gateway need beyond a request: whether this instance serves
 * (the lease), the request-log setting in force, our answer signer, and a DID resolver for the
 * providers whose answers we check. Started with the API role (main.ts), stopped after the
 * HTTP server so requests in flight still see an active instance.
 */
import type { Logger } from 'pino';
import type { Knex } from 'knex';
import type { DidResolver } from '../../auth/did-web-resolver.js';
import { LEASE_CHANNEL, REQUEST_LOG_CHANNEL, type RequestLogSetting } from '../../db/dataplane.js';
import { ACCESS_CHANNEL, accessCachesOf, readAccessNotice } from '../access-cache.js';
import type { SignAnswer } from '../signatures.js';
import { DataPlaneLease } from './lease.js';
import { PgListener } from './notifications.js';
import { RequestLogWatcher } from './request-log.js';

export interface DataPlaneRuntime {
  /** False on a standby instance: the data plane answers `standby`. */
  isActive(): boolean;
  /** For a standby answer: when the active instance's lease would run out. */
  standbyRetryAfterMs(): number;
  requestLog(): RequestLogSetting;
  signAnswer: SignAnswer;
  resolver: DidResolver;
  stop(): Promise<void>;
}

export async function startDataPlaneRuntime(options: {
  db: Knex;
  databaseUrl: string;
  logger: Logger;
  leaseTtlMs: number;
  signAnswer: SignAnswer;
  resolver: DidResolver;
}): Promise<DataPlaneRuntime> {
  const { db, logger } = options;
  const lease = new DataPlaneLease(db, options.leaseTtlMs, logger);
  // The watcher's poll also checks the listening connection; the listener tells it of changes.
  const requestLog = new RequestLogWatcher(db, logger, { checkAlive: () => listener.checkAlive() });
  // The gateway's and data plane's access caches hold only while notices of changes arrive.
  const caches = accessCachesOf(db);
  const listener = new PgListener(
    options.databaseUrl,
    [REQUEST_LOG_CHANNEL, LEASE_CHANNEL, ACCESS_CHANNEL],
    {
      onNotification(channel, payload) {
        if (channel === ACCESS_CHANNEL) caches.drop(readAccessNotice(payload));
        else if (channel === REQUEST_LOG_CHANNEL) void requestLog.refresh();
        else if (channel === LEASE_CHANNEL) lease.released();
      },
      onConnected() {
        caches.listeningStarted();
        void requestLog.refresh();
        lease.released();
      },
      onDisconnected() {
        caches.listeningStopped();
      },
    },
    logger,
  );
  await listener.start();
  await Promise.all([requestLog.start(), lease.start()]);
  return {
    isActive: () => lease.isActive(),
    standbyRetryAfterMs: () => lease.retryAfterMs(),
    requestLog: () => requestLog.current,
    signAnswer: options.signAnswer,
    resolver: options.resolver,
    async stop() {
      requestLog.stop();
      await lease.stop();
      await listener.stop();
    },
  };
}
