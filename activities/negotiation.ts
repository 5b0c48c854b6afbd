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
import { evidenceStore, type NewEvidence } from '../db/evidence.js';
import { outboxStore, type NewOutboxMessage } from '../db/outbox.js';

/** Deterministic per negotiation and version, so that a retried activity appends once. */
const stateEvidenceId = (negotiationId: string, version: number) =>
  `ev_${createHash('sha256').update(`${negotiationId}\n${version}`).digest('hex').slice(0, 32)}`;

/** Our message to the counterparty, with the evidence id the workflow chose for it. */
export type OutboundMessage = Omit<NewOutboxMessage, 'evidence_id'> & { evidence_id: string };

/**
 * One state change of a negotiation: the read model's new snapshot and its history entry, with
 * the message of ours that it sends (its evidence id becomes the entry's).
 */
export interface NegotiationWrite {
  snapshot: NegotiationSnapshot;
  entry: HistoryEntry;
  /** `operator.decision` for an operator's decision, else `negotiation.state`. */
  kind?: 'negotiation.state' | 'operator.decision';
  message?: OutboundMessage;
}

export interface QueuedMessage {
  outboxId: number;
  evidenceId: string;
}

/** Our outbound message as evidence (kind `dsp.outbound`). */
const outboundEvidence = (message: OutboundMessage): NewEvidence => ({
  id: message.evidence_id,
  kind: 'dsp.outbound',
  process_id: message.process_id,
  payload: { to: message.counterparty_did, url: message.url, message: message.body },
});

/**
 * A state change as evidence (kind `negotiation.state` or `operator.decision`); it points at the
 * message that caused it (inbound) or that it sends (outbound), if any.
 */
function stateEvidence({ snapshot, entry, kind, message }: NegotiationWrite): NewEvidence {
  return {
    id: stateEvidenceId(snapshot.id, snapshot.version),
    kind: kind ?? 'negotiation.state',
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
      message_evidence_id: message?.evidence_id ?? entry.evidence_id,
      note: entry.note,
      version: snapshot.version,
    },
  };
}

export function createNegotiationActivities(deps: { db: Db }) {
  const evidence = evidenceStore(deps.db);
  const activities = {
    /** Records our outbound message as evidence and writes it to the outbox (delivery follows). */
    async enqueueProtocolMessage(message: OutboundMessage): Promise<QueuedMessage> {
      const entry = await evidence.append(outboundEvidence(message));
      const row = await outboxStore(deps.db).insertOnce({ ...message, evidence_id: entry.id });
      return { outboxId: row.id, evidenceId: entry.id };
    },

    /**
     * State changes of one negotiation in the order the workflow made them, each with the
     * message of ours it sends (if any), in one activity: the workflow writes what an inbound
     * message changed together with its answer to it, one Temporal round trip instead of two.
     * The evidence entries (message first, then state) go to the chain together (one commit);
     * the outbox rows and the read model follow in order. Every step is idempotent, so a
     * retried activity writes each entry once.
     */
    async recordNegotiationWrites(writes: NegotiationWrite[]): Promise<Array<QueuedMessage | null>> {
      const appended = await Promise.all(
        writes.flatMap((w) => [
          w.message ? evidence.append(outboundEvidence(w.message)) : Promise.resolve(null),
          evidence.append(stateEvidence(w)),
        ]),
      );
      const outbox = outboxStore(deps.db);
      const negotiations = negotiationStore(deps.db);
      const queued: Array<QueuedMessage | null> = [];
      for (const [i, w] of writes.entries()) {
        const messageEntry = appended[2 * i];
        const stateEntry = appended[2 * i + 1]!;
        let q: QueuedMessage | null = null;
        if (w.message && messageEntry) {
          const row = await outbox.insertOnce({ ...w.message, evidence_id: messageEntry.id });
          q = { outboxId: row.id, evidenceId: messageEntry.id };
        }
        await negotiations.record(w.snapshot, {
          ...w.entry,
          evidence_id: q?.evidenceId ?? w.entry.evidence_id ?? stateEntry.id,
        });
        queued.push(q);
      }
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
