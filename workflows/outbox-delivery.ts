/**
 * Delivers one outbound message to a counterparty: bounded, capped exponential retries; when
 * they run out the row is dropped and the caller gets a readable error. Process workflows
 * (negotiation, transfer) run one of these per message; an operator's resend starts it again.
 */
import {
  ActivityFailure,
  ApplicationFailure,
  CancellationScope,
  isCancellation,
  proxyActivities,
} from '@temporalio/workflow';
import type { OutboxActivities } from '../activities/outbox.js';
import type { DeliveryRetry } from '../domain/outbox.js';

export interface OutboxDeliveryInput {
  outboxId: number;
  retry: DeliveryRetry;
}

export type OutboxDeliveryResult =
  { delivered: true; status: number; body?: unknown } | { delivered: false; error: string };

/**
 * Delivers one outbox row from inside any workflow: one activity attempt per try under
 * Temporal's retry policy; when retries run out the row is dropped and a readable error is
 * returned. Process workflows call this inline (no child workflow: one hop less per message).
 */
export async function deliverFromOutbox(
  outboxId: number,
  retry: DeliveryRetry,
): Promise<OutboxDeliveryResult> {
  const { deliverOutboxMessage } = proxyActivities<OutboxActivities>({
    startToCloseTimeout: '15 seconds',
    retry: {
      initialInterval: retry.initialIntervalMs,
      maximumInterval: retry.maxIntervalMs,
      backoffCoefficient: 2,
      maximumAttempts: retry.maxAttempts,
      nonRetryableErrorTypes: ['DeliveryRefused', 'OutboxMissing'],
    },
  });
  const { dropOutboxMessage } = proxyActivities<OutboxActivities>({
    startToCloseTimeout: '10 seconds',
    retry: { maximumInterval: '10 seconds' },
  });
  try {
    const { status, body } = await deliverOutboxMessage(outboxId, retry);
    return { delivered: true, status, body };
  } catch (err) {
    // A cancelled delivery (the process ended) is not a failed one: the row stays pending.
    if (isCancellation(err)) throw err;
    const cause = err instanceof ActivityFailure ? err.cause : err;
    const reason =
      cause instanceof ApplicationFailure || cause instanceof Error ? cause.message : String(cause);
    // A final refusal (4xx) is not retried: say so rather than "after retries".
    const refused = cause instanceof ApplicationFailure && cause.type === 'DeliveryRefused';
    const error = refused ? `message refused: ${reason}` : `message not delivered after retries: ${reason}`;
    await CancellationScope.nonCancellable(() => dropOutboxMessage(outboxId, error));
    return { delivered: false, error };
  }
}

/** The workflow an operator's resend starts for a dropped or pending row. */
export async function outboxDelivery(input: OutboxDeliveryInput): Promise<OutboxDeliveryResult> {
  const result = await deliverFromOutbox(input.outboxId, input.retry);
  // The answer body is for process workflows; the stand-alone delivery keeps its result small.
  return result.delivered ? { delivered: true, status: result.status } : result;
}
