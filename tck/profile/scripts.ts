/**
 * The decisions each TCK scenario expects from us, per dataset (negotiations) or agreement
 * (transfers) — what EDC's TCK extension plays with its pending guards and triggers. The
 * director watches our read models and, when a process reaches the situation a step waits for,
 * takes that step through the management API, as an operator would. Steps run in order, each once.
 *
 * Every process the TCK drives waits for the profile before each move of ours (the seeded offers
 * are `stepwise`, the webhook starts negotiations with `stepwise: true`), so a scenario that
 * needs us to hold simply has no step there; nothing depends on timing.
 */
import type { Logger } from 'pino';
import type { Db } from '../../db/knex.js';
import type { Operator } from './operator.js';

/** A state in which the process waits: for the TCK, or (a hold) for us. */
type Situation = 'REQUESTED' | 'OFFERED' | 'ACCEPTED' | 'AGREED' | 'VERIFIED' | 'STARTED' | 'SUSPENDED';
type Action =
  | 'approve'
  | 'counter_offer'
  | 'terminate'
  | 'accept'
  | 'counter_request'
  | 'start'
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

const PAUSE_MS = 1_000;
const step = (on: Situation, action: Action): Step => ({ on, do: action });
const after = (on: Situation, action: Action): Step => ({ on, do: action, afterMs: PAUSE_MS });

// Provider holds: a request (REQUESTED), our agreement (ACCEPTED), our finalization (VERIFIED).
const offer = step('REQUESTED', 'counter_offer');
const agree = step('REQUESTED', 'approve');
const reject = step('REQUESTED', 'terminate');
const agreeAccepted = step('ACCEPTED', 'approve');
const finalize = step('VERIFIED', 'approve');

/** Provider scenarios (CN): the TCK is the consumer; keyed by the dataset it requests. */
export const PROVIDER_SCRIPTS: Record<string, Step[]> = {
  ACN0101: [offer], // the TCK terminates in OFFERED
  ACN0102: [offer, reject], // the TCK counter-requests; we terminate
  ACN0103: [offer, agreeAccepted, finalize],
  ACN0104: [agree, finalize],
  ACN0201: [reject],
  ACN0202: [], // the TCK terminates in REQUESTED
  ACN0203: [agree], // the TCK terminates in AGREED
  ACN0204: [offer], // the TCK terminates in OFFERED
  ACN0205: [offer, after('OFFERED', 'terminate')],
  ACN0206: [offer, step('ACCEPTED', 'terminate')],
  ACN0207: [agree, step('VERIFIED', 'terminate')],
  ACN0301: [agree, finalize], // then the TCK's termination of a finalized negotiation is refused
  ACN0302: [offer], // the TCK's verification in OFFERED is refused
  ACN0303: [offer], // we hold in ACCEPTED: the TCK's verification there is refused
  ACN0304: [offer], // we hold the counter-request: the TCK's second one is refused
};

// Consumer: the TCK's offer waits for us (OFFERED), our verification waits in AGREED.
const accept = step('OFFERED', 'accept');
const verify = step('AGREED', 'approve');

/** Consumer scenarios (CN_C): the TCK is the provider; keyed by the dataset the TCK names in its webhook call. */
export const CONSUMER_SCRIPTS: Record<string, Step[]> = {
  ACNC0101: [accept, verify],
  ACNC0102: [step('OFFERED', 'counter_request')],
  ACNC0103: [step('OFFERED', 'terminate')],
  ACNC0104: [verify],
  ACNC0201: [],
  ACNC0202: [after('REQUESTED', 'terminate')],
  ACNC0203: [step('AGREED', 'terminate')],
  ACNC0204: [],
  ACNC0205: [accept],
  ACNC0206: [verify],
  ACNC0301: [],
  ACNC0302: [],
  ACNC0303: [],
  ACNC0304: [accept],
  ACNC0305: [accept],
  ACNC0306: [accept], // we hold in AGREED: the TCK's FINALIZED there is refused
};

/**
 * Provider transfers (TP): the TCK requests under a seeded agreement whose offer is stepwise, so
 * each transfer waits in REQUESTED for our start (or termination).
 */
const start = step('REQUESTED', 'start');
export const PROVIDER_TRANSFER_SCRIPTS: Record<string, Step[]> = {
  ATP0101: [start, after('STARTED', 'terminate')],
  ATP0102: [start, after('STARTED', 'complete')],
  ATP0103: [start, after('STARTED', 'suspend'), after('SUSPENDED', 'terminate')],
  ATP0104: [start, after('STARTED', 'suspend'), after('SUSPENDED', 'resume'), after('STARTED', 'complete')],
  ATP0105: [step('REQUESTED', 'terminate')],
  ATP0201: [start],
  ATP0202: [start],
  ATP0203: [start],
  ATP0204: [start],
  ATP0205: [], // the TCK terminates in REQUESTED
  ATP0301: [], // the TCK's completion in REQUESTED is refused
  ATP0302: [], // the TCK's suspension in REQUESTED is refused
  ATP0303: [start],
  ATP0304: [start],
  ATP0305: [start],
  ATP0306: [start],
};

/** Consumer transfers (TP_C): we request (the TCK's webhook) under a seeded agreement. */
export const CONSUMER_TRANSFER_SCRIPTS: Record<string, Step[]> = {
  ATPC0201: [after('STARTED', 'terminate')],
  ATPC0202: [after('STARTED', 'complete')],
  ATPC0203: [after('STARTED', 'suspend'), after('SUSPENDED', 'terminate')],
  ATPC0204: [after('STARTED', 'suspend'), after('SUSPENDED', 'resume'), after('STARTED', 'complete')],
  ATPC0205: [after('REQUESTED', 'terminate')],
};

interface Row {
  id: string;
  role: 'provider' | 'consumer';
  state: string;
  approval?: string | null;
  flow_state?: string | null;
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

/**
 * Where we decide, a state counts only once the workflow shows it waits for us (`approval:
 * pending`, a transfer's `awaiting_start`): a step taken earlier would race the workflow.
 */
const HOLDS: Record<'negotiation' | 'transfer', Record<Row['role'], readonly string[]>> = {
  negotiation: { provider: ['REQUESTED', 'ACCEPTED', 'VERIFIED'], consumer: ['OFFERED', 'AGREED'] },
  transfer: { provider: ['REQUESTED'], consumer: [] },
};

function situationOf(kind: 'negotiation' | 'transfer', r: Row): Situation | null {
  const state = WAITING.find((s) => s === r.state);
  if (!state) return null;
  if (!HOLDS[kind][r.role].includes(state)) return state;
  const held = kind === 'negotiation' ? r.approval === 'pending' : r.flow_state === 'awaiting_start';
  return held ? state : null;
}

/** The offer we answer with (counter-offer, counter-request): the one in force, without its target (the workflow sets it). */
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
    const path = `/api/v1/negotiations/${encodeURIComponent(row.id)}/${action.replace('_', '-')}`;
    const carriesOffer = action === 'counter_offer' || action === 'counter_request';
    await decide(operator, path, carriesOffer ? { offer: counterOffer(row.offer ?? {}) } : undefined);
  },
};

const transfers: Watched = {
  kind: 'transfer',
  rows: async (db) =>
    (await db.schema.hasTable('transfers'))
      ? db('transfers')
          .whereNotIn('state', ['COMPLETED', 'TERMINATED'])
          .select('id', 'role', 'state', 'flow_state', 'agreement_id as key')
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
      if (!step || busy.has(row.id) || situationOf(watched.kind, row) !== step.on) continue;
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
