import type { Db } from '../db/knex.js';
import { createOutboxActivities } from './outbox.js';

export interface ActivityDeps {
  db: Db;
}

/** All activities, built from their dependencies (the worker registers the result). */
export function createActivities(deps: ActivityDeps) {
  return { ...createOutboxActivities({ db: deps.db }) };
}
