/** Side effects of the negotiation workflow: its read model and its agreements. */
import type { Db } from '../db/knex.js';
import { negotiationStore, type HistoryEntry, type NegotiationSnapshot } from '../db/negotiations.js';
import { agreementStore, type AgreementRecord } from '../db/agreements.js';

export function createNegotiationActivities(deps: { db: Db }) {
  return {
    async recordNegotiation(snapshot: NegotiationSnapshot, entry: HistoryEntry | null): Promise<void> {
      await negotiationStore(deps.db).record(snapshot, entry);
    },
    async storeAgreement(agreement: Omit<AgreementRecord, 'created_at' | 'state'>): Promise<void> {
      await agreementStore(deps.db).insert(agreement);
    },
  };
}

export type NegotiationActivities = ReturnType<typeof createNegotiationActivities>;
