/**
 * The decisions each TCK scenario expects from us, per dataset (negotiations) or agreement
 * (transfers) — what EDC's TCK extension plays with its pending guards and triggers. The
 * director watches our read models and, when a process reaches the situation a step waits for,
 * takes that step through the management API, as an operator would. Steps run in order, each once.
 *
 * Situations: `pending` is a request or offer awaiting our operator (the seeded offers of
 * scripted datasets have manual approval); the others are states in which the process waits.
 */
import type { Logger } from 'pino';
import type { Db } from '../../db/knex.js';
import type { Operator } from './operator.js';

type Situation =
  'pending' | 'REQUESTED' | 'OFFERED' | 'ACCEPTED' | 'AGREED' | 'VERIFIED' | 'STARTED' | 'SUSPENDED';
type Action =
  | 'approve'
  | 'counter_offer'
  | 'terminate'
  | 'accept'
  | 'counter_request'
  | 'suspend'
  | 'resume'
  | 'complete';

interface Step {
  on: Situation;
  do: Action;
  /**
   * Wait before acting: where the TCK registers its handler for our message only once it has
   * seen the previous one (its own mocks pause the same way).
   */
  afterMs?: number;
}

const offer: Step = { on: 'pending', do: 'counter_offer' };
const approve: Step = { on: 'pending', do: 'approve' };
const reject: Step = { on: 'pending', do: 'terminate' };
const accept: Step = { on: 'OFFERED', do: 'accept' };
const PAUSE_MS = 1_000;

/** Provider scenarios (CN): the TCK is the consumer; keyed by the dataset it requests. */
export const PROVIDER_SCRIPTS: Record<string, Step[]> = {
  ACN0101: [offer],
  ACN0102: [offer, reject],
  ACN0103: [offer],
  ACN0104: [approve],
  ACN0201: [reject],
  ACN0202: [],
  ACN0203: [approve],
  ACN0204: [offer],
  ACN0205: [offer, { on: 'OFFERED', do: 'terminate', afterMs: PAUSE_MS }],
  ACN0206: [offer, { on: 'ACCEPTED', do: 'terminate' }],
  ACN0207: [approve, { on: 'VERIFIED', do: 'terminate' }],
  ACN0301: [approve],
  ACN0302: [offer],
  ACN0303: [offer],
  ACN0304: [offer],
};

/** Consumer scenarios (CN_C): the TCK is the provider; keyed by the dataset the TCK names in its webhook call. */
export const CONSUMER_SCRIPTS: Record<string, Step[]> = {
  ACNC0101: [accept],
  ACNC0102: [{ on: 'OFFERED', do: 'counter_request' }],
  ACNC0103: [{ on: 'OFFERED', do: 'terminate' }],
  ACNC0104: [],
  ACNC0201: [],
  ACNC0202: [{ on: 'REQUESTED', do: 'terminate', afterMs: PAUSE_MS }],
  ACNC0203: [{ on: 'AGREED', do: 'terminate' }],
  ACNC0204: [],
  ACNC0205: [accept],
  ACNC0206: [],
  ACNC0301: [],
  ACNC0302: [],
  ACNC0303: [],
  ACNC0304: [accept],
  ACNC0305: [accept],
  ACNC0306: [accept],
};

const after = (on: Situation, action: Action): Step => ({ on, do: action, afterMs: PAUSE_MS });

/**
 * Provider transfers (TP): the TCK requests under a seeded agreement; our provider starts by
 * itself (its own move), the rest is ours to decide.
 */
export const PROVIDER_TRANSFER_SCRIPTS: Record<string, Step[]> = {
  ATP0101: [after('STARTED', 'terminate')],
  ATP0102: [after('STARTED', 'complete')],
  ATP0103: [after('STARTED', 'suspend'), after('SUSPENDED', 'terminate')],
  ATP0104: [after('STARTED', 'suspend'), after('SUSPENDED', 'resume'), after('STARTED', 'complete')],
  ATP0105: [{ on: 'REQUESTED', do: 'terminate' }],
};

/** Consumer transfers (TP_C): we request (the TCK's webhook) under a seeded agreement. */
export const CONSUMER_TRANSFER_SCRIPTS: Record<string, Step[]> = {
  ATPC0201: [after('STARTED', 'terminate')],
  ATPC0202: [after('STARTED', 'complete')],
  ATPC0203: [after('STARTED', 'suspend'), after('SUSPENDED', 'terminate')],
  ATPC0204: [after('STARTED', 'suspend'), after('SUSPENDED', 'resume'), after('STARTED', 'complete')],
  ATPC0205: [after('REQUESTED', 'terminate')],
};

/** Datasets whose requests wait for the profile (their offers are seeded with manual approval). */
export const manualDatasets = new Set(Object.keys(PROVIDER_SCRIPTS));

interface Row {
  id: string;
  role: 'provider' | 'consumer';
  state: string;
  approval?: string | null;
  key: string | null;
  offer?: Record<string, unknown>;
}

const WAITING: readonly Situation[] = [
  'REQUESTED',
  'OFFERED',
  'ACCEPTED',
  'AGREED',
  'VERIFIED',
  'STARTED',
  'SUSPENDED',
];

/** A provider's request awaiting approval is `pending`; a consumer's offer awaiting acceptance is just OFFERED. */
const situationOf = (r: Row): Situation | null =>
  r.role === 'provider' && r.state === 'REQUESTED' && r.approval === 'pending'
    ? 'pending'
    : (WAITING.find((s) => s === r.state) ?? null);

/** The counter-offer we make: the offer in force, without its target (the workflow sets it) and empty rule lists. */
function counterOffer(current: Record<string, unknown>) {
  const out: Record<string, unknown> = { '@id': current['@id'] };
  for (const key of ['permission', 'prohibition', 'obligation']) {
    const rules = current[key];
    if (Array.isArray(rules) && rules.length > 0) out[key] = rules;
  }
  return out;
}

/** One kind of process the director follows: where it reads them, its scripts, how it acts. */
interface Watched {
  kind: 'negotiation' | 'transfer';
  rows(db: Db): Promise<Row[]>;
  scripts: Record<'provider' | 'consumer', Record<string, Step[]>>;
  act(operator: Operator, row: Row, action: Action): Promise<void>;
}

async function decide(operator: Operator, path: string, body?: unknown) {
  const answer = await operator.call('POST', path, body);
  if (answer.status !== 200) throw new Error(`answered ${answer.status}: ${JSON.stringify(answer.body)}`);
}

const negotiations: Watched = {
  kind: 'negotiation',
  rows: (db) =>
    db('negotiations')
      .whereNotIn('state', ['FINALIZED', 'TERMINATED'])
      .select('id', 'role', 'state', 'approval', 'dataset_id as key', 'offer'),
  scripts: { provider: PROVIDER_SCRIPTS, consumer: CONSUMER_SCRIPTS },
  async act(operator, row, action) {
    if (action === 'counter_request') {
      // A consumer's counter-request has no operator action yet (tck-findings.md).
      throw new Error('the consumer cannot send a counter-request (no operator action for it)');
    }
    const path = `/api/v1/negotiations/${encodeURIComponent(row.id)}/${action.replace('_', '-')}`;
    await decide(
      operator,
      path,
      action === 'counter_offer' ? { offer: counterOffer(row.offer ?? {}) } : undefined,
    );
  },
};

const transfers: Watched = {
  kind: 'transfer',
  rows: async (db) =>
    (await db.schema.hasTable('transfers'))
      ? db('transfers')
          .whereNotIn('state', ['COMPLETED', 'TERMINATED'])
          .select('id', 'role', 'state', 'agreement_id as key')
      : [],
  scripts: { provider: PROVIDER_TRANSFER_SCRIPTS, consumer: CONSUMER_TRANSFER_SCRIPTS },
  act: (operator, row, action) =>
    decide(operator, `/api/v1/transfers/${encodeURIComponent(row.id)}/${action}`),
};

export interface Director {
  /** Steps that failed (the run prints them: they explain a failing scenario). */
  problems: string[];
  stop(): Promise<void>;
}

export function startDirector(db: Db, operator: Operator, logger: Logger, pollMs = 50): Director {
  const next = new Map<string, number>();
  const busy = new Set<string>();
  const problems: string[] = [];
  let stopped = false;

  async function follow(watched: Watched) {
    for (const row of await watched.rows(db)) {
      const step = watched.scripts[row.role]?.[row.key ?? '']?.[next.get(row.id) ?? 0];
      if (!step || busy.has(row.id) || situationOf(row) !== step.on) continue;
      busy.add(row.id);
      next.set(row.id, (next.get(row.id) ?? 0) + 1);
      logger.info({ process: row.id, key: row.key, step }, `tck profile: scripted ${watched.kind} step`);
      const run = async () => {
        if (step.afterMs) await new Promise((r) => setTimeout(r, step.afterMs));
        await watched.act(operator, row, step.do);
      };
      run()
        .catch((err: unknown) => {
          const message = `${row.role} ${watched.kind} ${row.key} ${row.id}: ${step.do} on ${step.on}: ${(err as Error).message}`;
          problems.push(message);
          logger.warn({ process: row.id }, `tck profile: ${message}`);
        })
        .finally(() => busy.delete(row.id));
    }
  }

  const loop = (async () => {
    while (!stopped) {
      try {
        await follow(negotiations);
        await follow(transfers);
      } catch (err) {
        if (!stopped) logger.warn({ err }, 'tck profile: reading processes failed');
      }
      await new Promise((r) => setTimeout(r, pollMs));
    }
  })();

  return {
    problems,
    async stop() {
      stopped = true;
      await loop;
    },
  };
}
