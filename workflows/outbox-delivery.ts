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

export type OutboxDeliveryResult = { delivered: true; status: number } | { delivered: false; error: string };

export async function outboxDelivery(input: OutboxDeliveryInput): Promise<OutboxDeliveryResult> {
  const { retry } = input;
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
    const { status } = await deliverOutboxMessage(input.outboxId, retry);
    return { delivered: true, status };
  } catch (err) {
    // A cancelled delivery (the process ended) is not a failed one: the row stays pending.
    if (isCancellation(err)) throw err;
    const cause = err instanceof ActivityFailure ? err.cause : err;
    const reason =
      cause instanceof ApplicationFailure || cause instanceof Error ? cause.message : String(cause);
    const error = `message not delivered after retries: ${reason}`;
    await CancellationScope.nonCancellable(() => dropOutboxMessage(input.outboxId, error));
    return { delivered: false, error };
  }
}
