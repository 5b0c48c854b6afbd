/**
 * Side effects of the negotiation workflow: its read model, its evidence, its outbound
 * messages and its agreements. Every state change and every message is an evidence entry; the
 * entry's id is the `evidence_id` of the history entry and outbox row.
 */
import { createHash } from 'node:crypto';
import { ApplicationFailure } from '@temporalio/activity';
import type { Db } from '../db/knex.js';
import { negotiationStore, type HistoryEntry, type NegotiationSnapshot } from '../db/negotiations.js';
import { agreementStore, type AgreementRecord } from '../db/agreements.js';
import { evidenceStore } from '../db/evidence.js';
import { outboxStore, type NewOutboxMessage } from '../db/outbox.js';

/** Deterministic per negotiation and version, so that a retried activity appends once. */
const stateEvidenceId = (negotiationId: string, version: number) =>
  `ev_${createHash('sha256').update(`${negotiationId}\n${version}`).digest('hex').slice(0, 32)}`;

export function createNegotiationActivities(deps: { db: Db }) {
  const evidence = evidenceStore(deps.db);
  const activities = {
    /**
     * Records a state change: an evidence entry (kind `negotiation.state`, or
     * `operator.decision`), then the read model and history. The history entry points at the
     * message's evidence when a message caused the change, else at the state entry.
     */
    async recordNegotiation(
      snapshot: NegotiationSnapshot,
      entry: HistoryEntry,
      kind: 'negotiation.state' | 'operator.decision' = 'negotiation.state',
    ): Promise<string> {
      const stateEntry = await evidence.append({
        id: stateEvidenceId(snapshot.id, snapshot.version),
        kind,
        process_id: snapshot.id,
        payload: {
          role: snapshot.role,
          state: snapshot.state,
          consumer_pid: snapshot.consumer_pid,
          provider_pid: snapshot.provider_pid,
          counterparty_did: snapshot.counterparty_did,
          agreement_id: snapshot.agreement_id,
          approval: snapshot.approval,
          message_type: entry.message_type,
          direction: entry.direction,
          message_evidence_id: entry.evidence_id,
          note: entry.note,
          version: snapshot.version,
        },
      });
      await negotiationStore(deps.db).record(snapshot, {
        ...entry,
        evidence_id: entry.evidence_id ?? stateEntry.id,
      });
      return stateEntry.id;
    },

    /** Records our outbound message as evidence and writes it to the outbox (delivery follows). */
    async enqueueProtocolMessage(message: Omit<NewOutboxMessage, 'evidence_id'> & { evidence_id: string }) {
      const entry = await evidence.append({
        id: message.evidence_id,
        kind: 'dsp.outbound',
        process_id: message.process_id,
        payload: { to: message.counterparty_did, url: message.url, message: message.body },
      });
      const row = await outboxStore(deps.db).insertOnce({ ...message, evidence_id: entry.id });
      return { outboxId: row.id, evidenceId: entry.id };
    },

    /**
     * Our move in one step: the message as evidence and in the outbox, then the state change it
     * makes. One activity instead of two saves a round trip through Temporal per message.
     */
    async recordAndEnqueue(
      snapshot: NegotiationSnapshot,
      entry: Omit<HistoryEntry, 'evidence_id'>,
      message: Omit<NewOutboxMessage, 'evidence_id'> & { evidence_id: string },
    ) {
      const queued = await activities.enqueueProtocolMessage(message);
      await activities.recordNegotiation(snapshot, { ...entry, evidence_id: queued.evidenceId });
      return queued;
    },

    /**
     * Stores the agreement once (a retried activity changes nothing). An id that another
     * negotiation's agreement already has is refused for good: two agreements must never share
     * one record.
     */
    async storeAgreement(agreement: Omit<AgreementRecord, 'created_at' | 'state'>): Promise<void> {
      const store = agreementStore(deps.db);
      // A timestamp without an offset is UTC (xsd:dateTime; the protocol schema let only valid ones in).
      const signedAt = /(Z|[+-]\d{2}:\d{2})$/i.test(agreement.signed_at)
        ? agreement.signed_at
        : `${agreement.signed_at}Z`;
      await store.insert({ ...agreement, signed_at: signedAt });
      const stored = await store.get(agreement.id);
      if (stored && stored.negotiation_id !== agreement.negotiation_id) {
        throw ApplicationFailure.nonRetryable(
          `agreement ${agreement.id} belongs to another negotiation (${stored.negotiation_id})`,
          'AgreementConflict',
        );
      }
    },
  };
  return activities;
}

export type NegotiationActivities = ReturnType<typeof createNegotiationActivities>;
