import type { Db } from './knex.js';
import { toRfc3339 } from '../domain/time.js';

export const OUTBOX_STATUSES = ['pending', 'delivered', 'dropped'] as const;
export type OutboxStatus = (typeof OUTBOX_STATUSES)[number];

export interface OutboxRow {
  id: number;
  process_id: string;
  kind: string;
  message_type: string;
  counterparty_did: string;
  url: string;
  evidence_id: string | null;
  status: OutboxStatus;
  attempts: number;
  next_attempt_at: string;
  last_error: string | null;
  response_status: number | null;
  created_at: string;
  resent_at: string | null;
  delivered_at: string | null;
}

type Row = Omit<OutboxRow, 'next_attempt_at' | 'created_at' | 'resent_at' | 'delivered_at'> & {
  body: unknown;
  next_attempt_at: Date;
  created_at: Date;
  resent_at: Date | null;
  delivered_at: Date | null;
};

const ts = (d: Date | null) => (d ? toRfc3339(d) : null);

const toOutboxRow = (r: Row): OutboxRow => ({
  id: r.id,
  process_id: r.process_id,
  kind: r.kind,
  message_type: r.message_type,
  counterparty_did: r.counterparty_did,
  url: r.url,
  evidence_id: r.evidence_id,
  status: r.status,
  attempts: r.attempts,
  next_attempt_at: toRfc3339(r.next_attempt_at),
  last_error: r.last_error,
  response_status: r.response_status,
  created_at: toRfc3339(r.created_at),
  resent_at: ts(r.resent_at),
  delivered_at: ts(r.delivered_at),
});

export interface NewOutboxMessage {
  process_id: string;
  kind: string;
  message_type: string;
  counterparty_did: string;
  url: string;
  body: unknown;
  evidence_id: string | null;
}

export function outboxStore(db: Db) {
  return {
    async insert(m: NewOutboxMessage): Promise<OutboxRow> {
      const [row] = (await db('outbox')
        .insert({ ...m, body: JSON.stringify(m.body) })
        .returning('*')) as Row[];
      return toOutboxRow(row!);
    },
    /** Inserts once per evidence id: a retried activity finds the row it wrote before. */
    async insertOnce(m: NewOutboxMessage & { evidence_id: string }): Promise<OutboxRow> {
      const existing = (await db('outbox').where({ evidence_id: m.evidence_id }).first()) as Row | undefined;
      if (existing) return toOutboxRow(existing);
      return this.insert(m);
    },
    async get(id: number): Promise<(OutboxRow & { body: unknown }) | undefined> {
      const row = (await db('outbox').where({ id }).first()) as Row | undefined;
      return row ? { ...toOutboxRow(row), body: row.body } : undefined;
    },
    async recordAttempt(id: number, a: { error: string | null; status: number | null; nextAttemptAt: Date }) {
      await db('outbox')
        .where({ id })
        .update({
          attempts: db.raw('attempts + 1'),
          last_error: a.error,
          response_status: a.status,
          next_attempt_at: a.nextAttemptAt,
        });
    },
    /** `answer`: the counterparty's (small JSON) answer, kept for a delivery that runs again. */
    async markDelivered(id: number, status: number, answer: unknown = null) {
      await db('outbox')
        .where({ id })
        .update({
          status: 'delivered',
          delivered_at: db.fn.now(),
          response_status: status,
          response_body: answer === null ? null : JSON.stringify(answer),
          last_error: null,
        });
    },
    async deliveredAnswer(id: number): Promise<unknown> {
      const row: { response_body: unknown } | undefined = await db('outbox')
        .where({ id })
        .first('response_body');
      return row?.response_body ?? null;
    },
    async markDropped(id: number, error: string) {
      await db('outbox')
        .where({ id })
        .whereNot({ status: 'delivered' })
        .update({ status: 'dropped', last_error: error });
    },
    /** A resend puts a dropped or pending message back to pending; a delivered one stays delivered. */
    async markResent(id: number): Promise<OutboxRow | undefined> {
      const [row] = (await db('outbox')
        .where({ id })
        .whereNot({ status: 'delivered' })
        .update({ status: 'pending', resent_at: db.fn.now(), next_attempt_at: db.fn.now() })
        .returning('*')) as Row[];
      return row ? toOutboxRow(row) : undefined;
    },
    /** Our undelivered messages of a process, oldest first. */
    async undelivered(processId: string): Promise<OutboxRow[]> {
      const rows = (await db('outbox')
        .where({ process_id: processId })
        .whereNot({ status: 'delivered' })
        .orderBy('id')) as Row[];
      return rows.map(toOutboxRow);
    },
  };
}
