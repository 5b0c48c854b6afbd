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

/**
 * A refusal as an operator reads it: the status, and the code and reasons of a protocol error
 * body (DSP errors and ours carry `code` and `reason[]`), else the start of the body.
 */
export function describeAnswer(status: number, text: string): string {
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    parsed = undefined;
  }
  const body = parsed as { code?: unknown; reason?: unknown } | undefined;
  if (body && typeof body === 'object' && typeof body.code === 'string') {
    const reasons = (Array.isArray(body.reason) ? body.reason : [body.reason])
      .map((r) =>
        typeof r === 'string'
          ? r
          : r && typeof r === 'object'
            ? ((r as { message?: string }).message ?? JSON.stringify(r))
            : null,
      )
      .filter((r): r is string => !!r);
    return `the counterparty answered ${status} ${body.code}${reasons.length ? `: ${reasons.join('; ').slice(0, 500)}` : ''}`;
  }
  return `the counterparty answered ${status}${text ? `: ${text.slice(0, 500)}` : ''}`;
}
