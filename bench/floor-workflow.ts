/**
 * The floor of bench/negotiation.ts: the least a Temporal-driven negotiation can cost on the
 * same server. One workflow started with update-with-start, three Updates, then its result; no
 * activities, no database, no HTTP between connectors.
 */
import { condition, defineUpdate, setHandler } from '@temporalio/workflow';

/** The update that comes with the start (update-with-start). */
export const floorStartUpdate = defineUpdate<number>('floorStart');
/** One of the three Updates that follow; the workflow ends after the third. */
export const floorStepUpdate = defineUpdate<number, [number]>('floorStep');

export const FLOOR_STEPS = 3;

export async function floor(): Promise<number> {
  let steps = 0;
  setHandler(floorStartUpdate, () => steps);
  setHandler(floorStepUpdate, (n: number) => {
    steps++;
    return n;
  });
  await condition(() => steps >= FLOOR_STEPS);
  return steps;
}
