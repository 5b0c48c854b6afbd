/** Outbox activities: write the row, attempt one delivery, mark the row dropped when retries run out. */
import { ApplicationFailure, Context } from '@temporalio/activity';
import { request, type Dispatcher } from 'undici';
import type { Db } from '../db/knex.js';
import { outboxStore, type NewOutboxMessage } from '../db/outbox.js';
import { describeAnswer, isRetryableStatus, retryDelayMs, type DeliveryRetry } from '../domain/outbox.js';

export interface OutboxDeps {
  db: Db;
  dispatcher?: Dispatcher;
  /** Adds authentication (e.g. a connector token) to each attempt; the identity feature provides it. */
  authorize?: (message: { counterparty_did: string; url: string }) => Promise<Record<string, string>>;
}

const ATTEMPT_TIMEOUT_MS = 10_000;
const MAX_ANSWER_CHARS = 64 * 1024;

/** The counterparty's answer, for the process to read (e.g. the providerPid in a 201); small JSON only. */
function parseAnswer(text: string): unknown {
  if (!text || text.length > MAX_ANSWER_CHARS) return null;
  try {
    const answer: unknown = JSON.parse(text);
    // PostgreSQL cannot store these (jsonb, text): such an answer would fail every retry.
    return storable(answer) ? answer : null;
  } catch {
    return null;
  }
}

/** NUL and lone surrogates: JSON may carry them, PostgreSQL text and jsonb cannot. */
// eslint-disable-next-line no-control-regex -- NUL is exactly what is looked for
const UNSTORABLE = /\u0000|\p{Cs}/u;

/** Whether a parsed JSON value holds no string (or key) PostgreSQL would refuse. */
function storable(value: unknown): boolean {
  const pending: unknown[] = [value];
  while (pending.length) {
    const v = pending.pop();
    if (typeof v === 'string') {
      if (UNSTORABLE.test(v)) return false;
    } else if (v && typeof v === 'object') {
      for (const [key, item] of Object.entries(v)) {
        if (UNSTORABLE.test(key)) return false;
        pending.push(item);
      }
    }
  }
  return true;
}

/** Text from a peer made storable: what PostgreSQL refuses becomes U+FFFD. */
// eslint-disable-next-line no-control-regex -- NUL is exactly what is replaced
const storableText = (text: string) => text.replace(/\u0000|\p{Cs}/gu, '\uFFFD');

export function createOutboxActivities(deps: OutboxDeps) {
  const store = outboxStore(deps.db);
  return {
    async enqueueOutboxMessage(message: NewOutboxMessage): Promise<number> {
      return (await store.insert(message)).id;
    },

    /**
     * One delivery attempt. Throws a retryable failure for network errors and retryable
     * statuses (Temporal retries with the policy), a non-retryable one for a final refusal.
     */
    async deliverOutboxMessage(
      id: number,
      policy: DeliveryRetry,
    ): Promise<{ status: number; body: unknown }> {
      const row = await store.get(id);
      if (!row) throw ApplicationFailure.nonRetryable(`outbox message ${id} does not exist`, 'OutboxMissing');
      // Delivered by an earlier run of this activity (its completion was lost): the same answer.
      if (row.status === 'delivered')
        return { status: row.response_status ?? 200, body: await store.deliveredAnswer(id) };
      const attempt = Context.current().info.attempt;
      // After the last attempt there is no next one: the row shows now, and the workflow drops it.
      const nextAttemptAt = new Date(
        Date.now() + (attempt < policy.maxAttempts ? retryDelayMs(attempt, policy) : 0),
      );
      let status: number | null = null;
      let error: string;
      try {
        const headers = { 'content-type': 'application/json', ...(await deps.authorize?.(row)) };
        const res = await request(row.url, {
          method: 'POST',
          headers,
          body: JSON.stringify(row.body),
          dispatcher: deps.dispatcher,
          headersTimeout: ATTEMPT_TIMEOUT_MS,
          bodyTimeout: ATTEMPT_TIMEOUT_MS,
          signal: AbortSignal.timeout(ATTEMPT_TIMEOUT_MS),
        });
        status = res.statusCode;
        const text = await res.body.text();
        if (status >= 200 && status < 300) {
          await store.recordAttempt(id, { error: null, status, nextAttemptAt: new Date() });
          const answer = parseAnswer(text);
          await store.markDelivered(id, status, answer);
          return { status, body: answer };
        }
        error = storableText(describeAnswer(status, text));
      } catch (err) {
        const e = err as { code?: string; name?: string; message?: string };
        error =
          e.code === 'ECONNREFUSED'
            ? 'connection refused'
            : e.name === 'TimeoutError'
              ? 'timed out'
              : storableText(e.message ?? String(err));
      }
      await store.recordAttempt(id, { error, status, nextAttemptAt });
      if (status !== null && !isRetryableStatus(status)) {
        throw ApplicationFailure.nonRetryable(error, 'DeliveryRefused');
      }
      throw ApplicationFailure.retryable(error, 'DeliveryFailed');
    },

    async dropOutboxMessage(id: number, error: string): Promise<void> {
      await store.markDropped(id, error);
    },
  };
}

export type OutboxActivities = ReturnType<typeof createOutboxActivities>;
