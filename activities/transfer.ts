/**
 * Side effects of the transfer and agreement-termination workflows: the read model and its
 * evidence, outbound messages, pull tokens of our data plane (issue, revoke, renew), the
 * connection a consumer transfer serves, and the end of an agreement.
 */
import { createHash } from 'node:crypto';
import { ApplicationFailure, Context } from '@temporalio/activity';
import type { Db } from '../db/knex.js';
import {
  agreementEnds,
  transferStore,
  type TransferHistoryEntry,
  type TransferSnapshot,
} from '../db/transfers.js';
import { connectionStore } from '../db/connections.js';
import { evidenceStore } from '../db/evidence.js';
import { outboxStore, type NewOutboxMessage } from '../db/outbox.js';
import type { Party } from '../domain/negotiation.js';
import {
  TokenRefreshError,
  tokenDigest,
  issueTransferAccess,
  refreshTransferToken,
  revokeTransferAccess,
  type DataAddress,
} from '../gateway/dataplane/access.js';
import {
  AGREEMENT_ENDED,
  RENEWAL_REFUSED,
  connectionSupersededSignal,
} from '../workflows/transfer-messages.js';
import { isTransferEnded, withTokenDigest } from '../domain/transfer.js';

/** Deterministic per transfer and version, so that a retried activity appends once. */
const stateEvidenceId = (transferId: string, version: number) =>
  `ev_${createHash('sha256').update(`transfer\n${transferId}\n${version}`).digest('hex').slice(0, 32)}`;

export interface TransferActivityDeps {
  db: Db;
  /** Lifetime of the pull tokens we issue (TRANSFER_TOKEN_TTL); the data plane's default otherwise. */
  tokenTtlSeconds?: number;
  /** DID_WEB_ALLOW_HTTP: a provider's refresh endpoint may be on loopback (connectors side by side). */
  allowLoopbackPeers?: boolean;
}

type OutboundMessage = Omit<NewOutboxMessage, 'evidence_id'> & { evidence_id: string };

export function createTransferActivities(deps: TransferActivityDeps) {
  const { db } = deps;
  const evidence = evidenceStore(db);
  const activities = {
    /**
     * Records a state change: an evidence entry (kind `transfer.state`, or `operator.decision`),
     * then the read model and history. The history entry points at the message's evidence when
     * a message caused the change, else at the state entry.
     */
    async recordTransfer(
      snapshot: TransferSnapshot,
      entry: TransferHistoryEntry,
      kind: 'transfer.state' | 'operator.decision' = 'transfer.state',
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
          agreement_id: snapshot.agreement_id,
          counterparty_did: snapshot.counterparty_did,
          flow_state: snapshot.flow_state,
          message_type: entry.message_type,
          direction: entry.direction,
          message_evidence_id: entry.evidence_id,
          note: entry.note,
          version: snapshot.version,
        },
      });
      await transferStore(db).record(snapshot, { ...entry, evidence_id: entry.evidence_id ?? stateEntry.id });
      if (snapshot.connection_alias) await connectionStore(db).transferRecorded(snapshot.connection_alias);
      if (snapshot.connection_alias && snapshot.role === 'consumer' && snapshot.version === 1) {
        await activities.attachConnection(snapshot);
      }
      return stateEntry.id;
    },

    /** Records our outbound message as evidence and writes it to the outbox (delivery follows). */
    async enqueueTransferMessage(message: OutboundMessage) {
      const entry = await evidence.append({
        id: message.evidence_id,
        kind: 'dsp.outbound',
        process_id: message.process_id,
        payload: {
          to: message.counterparty_did,
          url: message.url,
          message: withTokenDigest(message.body, tokenDigest),
        },
      });
      const row = await outboxStore(db).insertOnce({ ...message, evidence_id: entry.id });
      return { outboxId: row.id, evidenceId: entry.id };
    },

    /** Our move in one step: the message as evidence and in the outbox, then the state change it makes. */
    async recordTransferAndEnqueue(
      snapshot: TransferSnapshot,
      entry: Omit<TransferHistoryEntry, 'evidence_id'>,
      message: OutboundMessage,
    ) {
      const queued = await activities.enqueueTransferMessage(message);
      await activities.recordTransfer(snapshot, { ...entry, evidence_id: queued.evidenceId });
      return queued;
    },

    /** Points the transfer's connection at it: from now on the gateway uses this transfer. */
    async attachConnection(snapshot: TransferSnapshot): Promise<void> {
      const alias = snapshot.connection_alias!;
      const { previousTransferId } = await connectionStore(db).attachTransfer({
        alias,
        agreementId: snapshot.agreement_id,
        transferId: snapshot.id,
        providerDid: snapshot.counterparty_did,
      });
      // The transfer the connection served until now would run (and renew its token) for nobody:
      // it ends, and tells its provider. A retried activity signals again; an ended one ignores it.
      const previous = previousTransferId ? await transferStore(db).get(previousTransferId) : undefined;
      if (previous && !isTransferEnded(previous.state)) {
        await Context.current()
          .client.workflow.getHandle(previous.workflow_id)
          .signal(connectionSupersededSignal, { alias, by: snapshot.id });
      }
    },

    /**
     * Issues the pull token of a transfer we provide (start and resume). Refused when the
     * agreement has ended meanwhile: a transfer never gets access its agreement no longer gives.
     */
    async issueTransferToken(input: {
      transferId: string;
      agreementId: string;
      consumerDid: string;
      endpoint: string;
      issueKey: string;
    }): Promise<DataAddress> {
      const agreement = await db('agreements')
        .where({ id: input.agreementId })
        .first<{ state: string } | undefined>('state');
      if (agreement?.state !== 'active') {
        throw ApplicationFailure.nonRetryable(
          `agreement ${input.agreementId} is not active`,
          AGREEMENT_ENDED,
        );
      }
      return issueTransferAccess(db, {
        ...input,
        ...(deps.tokenTtlSeconds ? { ttlSeconds: deps.tokenTtlSeconds } : {}),
      });
    },

    /** Every token of the transfer stops working at once (suspend, complete, terminate). */
    async revokeTransferToken(transferId: string): Promise<void> {
      await revokeTransferAccess(db, transferId);
    },

    /** Consumer: renews the token of our data address at the provider; a refused token is final. */
    async renewDataAddress(address: DataAddress): Promise<DataAddress> {
      try {
        return await refreshTransferToken(address, { allowLoopback: deps.allowLoopbackPeers ?? false });
      } catch (err) {
        if (err instanceof TokenRefreshError && !err.retryable)
          throw ApplicationFailure.nonRetryable(err.message, RENEWAL_REFUSED);
        throw err;
      }
    },

    /**
     * Ends an agreement on our side: state `ended` (the data plane stops serving it at once), the
     * tokens of every transfer under it revoked, and an evidence entry. Returns how it ended and
     * the transfers still running under it, for the workflow to end them.
     */
    async endAgreement(input: {
      agreementId: string;
      endedBy: Party;
      reason: string | null;
      actor: string;
      messageEvidenceId: string | null;
    }) {
      const ended = await agreementEnds(db).end(input.agreementId, input.endedBy, input.reason);
      if (!ended)
        throw ApplicationFailure.nonRetryable(`no agreement ${input.agreementId}`, 'UnknownAgreement');
      // Content fixed by the inputs and the stored end, so that a retried activity appends once.
      await evidence.append({
        id: `ev_${createHash('sha256').update(`agreement.ended\n${input.agreementId}`).digest('hex').slice(0, 32)}`,
        kind: 'agreement.ended',
        process_id: input.agreementId,
        payload: {
          agreement_id: input.agreementId,
          ended_by: ended.endedBy,
          ended_at: ended.endedAt,
          reason: ended.reason,
          actor: input.actor,
          message_evidence_id: input.messageEvidenceId,
        },
      });
      const running = await transferStore(db).runningUnder(input.agreementId);
      for (const t of running) await revokeTransferAccess(db, t.id);
      return { ...ended, running };
    },
  };
  return activities;
}

export type TransferActivities = ReturnType<typeof createTransferActivities>;
