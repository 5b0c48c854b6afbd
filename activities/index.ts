import { peerDispatcher } from '../auth/peer-addresses.js';
import type { Db } from '../db/knex.js';
import { createOutboxActivities } from './outbox.js';
import { createEvidenceActivities } from './evidence.js';
import { createNegotiationActivities } from './negotiation.js';
import { createTransferActivities } from './transfer.js';

export interface ActivityDeps {
  db: Db;
  /** Headers that authenticate an outbound message to a counterparty (our connector token). */
  authorize?: (message: { counterparty_did: string; url: string }) => Promise<Record<string, string>>;
  /** Lifetime of the pull tokens our data plane issues for transfers (TRANSFER_TOKEN_TTL). */
  transferTokenTtlSeconds?: number;
  /** DID_WEB_ALLOW_HTTP: peer-given addresses may be on loopback (connectors side by side). */
  allowLoopbackPeers?: boolean;
}

/** All activities, built from their dependencies (the worker registers the result). */
export function createActivities(deps: ActivityDeps) {
  return {
    ...createOutboxActivities({
      db: deps.db,
      // Callback addresses were checked when they arrived; names are checked again at connect.
      dispatcher: peerDispatcher(deps.allowLoopbackPeers ?? false),
      ...(deps.authorize ? { authorize: deps.authorize } : {}),
    }),
    ...createEvidenceActivities({ db: deps.db }),
    ...createNegotiationActivities({ db: deps.db }),
    ...createTransferActivities({
      db: deps.db,
      tokenTtlSeconds: deps.transferTokenTtlSeconds,
      allowLoopbackPeers: deps.allowLoopbackPeers ?? false,
    }),
  };
}
