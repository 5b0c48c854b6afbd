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
}

/** All activities, built from their dependencies (the worker registers the result). */
export function createActivities(deps: ActivityDeps) {
  return {
    ...createOutboxActivities({ db: deps.db, ...(deps.authorize ? { authorize: deps.authorize } : {}) }),
    ...createEvidenceActivities({ db: deps.db }),
    ...createNegotiationActivities({ db: deps.db }),
    ...createTransferActivities({ db: deps.db, tokenTtlSeconds: deps.transferTokenTtlSeconds }),
  };
}
