/**
 * Delivery of outbound messages: a bounded, capped exponential retry. The workflow hands the
 * same policy to Temporal's activity retry and to the activity, so that `next_attempt_at`
 * in the outbox row shows when Temporal will really try again.
 */
export interface DeliveryRetry {
  initialIntervalMs: number;
  maxIntervalMs: number;
  maxAttempts: number;
}

export const DEFAULT_DELIVERY_RETRY: DeliveryRetry = {
  initialIntervalMs: 1_000,
  maxIntervalMs: 60_000,
  maxAttempts: 12,
};

/** Delay before attempt `attempt + 1`, after `attempt` failed attempts (1-based). */
export function retryDelayMs(attempt: number, policy: DeliveryRetry): number {
  return Math.min(policy.initialIntervalMs * 2 ** (attempt - 1), policy.maxIntervalMs);
}

/**
 * Whether a peer's answer may turn out differently later. 4xx answers are final except
 * timeouts, rate limits and conflicts (a peer may not yet have processed our previous message).
 */
export const isRetryableStatus = (status: number): boolean =>
  status >= 500 || [408, 409, 425, 429].includes(status);
