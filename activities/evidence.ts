/** Evidence activities: append an entry to the hash-chained log, once, however often Temporal retries. */
import { createHash } from 'node:crypto';
import { ApplicationFailure, Context } from '@temporalio/activity';
import type { Db } from '../db/knex.js';
import {
  EvidenceConflictError,
  EvidenceInputError,
  evidenceStore,
  type AppendedEvidence,
  type NewEvidence,
} from '../db/evidence.js';

export interface EvidenceDeps {
  db: Db;
}

export function createEvidenceActivities(deps: EvidenceDeps) {
  const store = evidenceStore(deps.db);
  return {
    /**
     * Appends an entry and answers its id, seq, hash and time. Temporal may run an activity
     * again after its first attempt committed (the worker died before reporting), so an entry
     * with the same id is recorded once: given `id`, or else one derived from the calling
     * workflow run and activity, a second append returns the first entry.
     */
    async appendEvidence(entry: NewEvidence): Promise<AppendedEvidence> {
      try {
        return await store.append({ ...entry, id: entry.id ?? activityScopedId() });
      } catch (err) {
        // Retrying cannot fix what was asked for; anything else (database down) may pass later.
        if (err instanceof EvidenceInputError || err instanceof EvidenceConflictError)
          throw ApplicationFailure.nonRetryable(err.message, err.name);
        throw err;
      }
    },
  };
}

/** The same for every attempt of one activity call; undefined outside an activity (scripts, tests). */
function activityScopedId(): string | undefined {
  let info: Context['info'];
  try {
    info = Context.current().info;
  } catch {
    return undefined;
  }
  const run = info.workflowExecution;
  if (!run) return undefined; // an activity started on its own, not by a workflow
  const key = `${run.workflowId}\n${run.runId}\n${info.activityId}`;
  return `ev_${createHash('sha256').update(key).digest('hex').slice(0, 32)}`;
}

export type EvidenceActivities = ReturnType<typeof createEvidenceActivities>;
