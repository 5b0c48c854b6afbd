import type { Logger } from 'pino';
import type { Client } from '@temporalio/client';
import type { Db } from '../db/knex.js';
import type { DeliveryRetry } from '../domain/outbox.js';
import type { AuthorityClient } from '../auth/authority.js';

/** What route handlers may use: storage, the Temporal client, logging. Built once per process. */
export interface Services {
  db: Db;
  logger: Logger;
  temporal: Client | null;
  taskQueue: string;
  version: string;
  /** Who this connector is towards peers, and how its processes behave. */
  connector: ConnectorSettings;
  /** The data space's member registry (display names of counterparties). */
  authority?: AuthorityClient;
  /** Self-issued connector tokens for calls the API makes to other connectors (a peer's catalog). */
  peerTokens?: { issue(audienceDid: string): Promise<string> };
}

export interface ConnectorSettings {
  /** Our participant DID. */
  did: string;
  /** Our public address and the DSP base below it (also our callbackAddress). */
  publicUrl: string;
  dspAddress: string;
  /** How long a request waits for an operator's approval. */
  approvalTimeoutMs: number;
  /** How long a negotiation waits for the counterparty's next message (NEGOTIATION_DEADLINE). */
  responseTimeoutMs?: number;
  /** DID_WEB_ALLOW_HTTP: loopback peers (DIDs and callback addresses) are accepted, for local runs. */
  allowLoopbackPeers?: boolean;
  deliveryRetry: DeliveryRetry;
  /** TRANSFER_HISTORY_LIMIT: events after which a transfer's workflow continues as new. */
  transferHistoryLimit?: number | null;
}
