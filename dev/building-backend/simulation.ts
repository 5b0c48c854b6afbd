/**
 * Values of the sample backend: a deterministic function of point id and time, so that two
 * reads a second apart agree with each other and tests can reason about them, yet values
 * move. A few points are deliberately never available (`no_data`) or stuck two hours in the
 * past (`stale`), so that the data plane's `max_age` handling has something to act on.
 */
import type { PointRecord, PointValue, Simulation, ValueType } from './building-data.js';

/** FNV-1a, 32 bit: stable across runs and platforms, unlike anything seeded. */
export function stableHash(text: string): number {
  let hash = 0x811c9dc5;
  for (let i = 0; i < text.length; i++) {
    hash ^= text.charCodeAt(i);
    hash = Math.imul(hash, 0x01000193) >>> 0;
  }
  return hash;
}

export type Availability = 'live' | 'stale' | 'no_data';

/** About one point in 25 has no data and one in 20 is stale; which ones depends only on the id. */
export function availabilityOf(pointId: string): Availability {
  const h = stableHash(`availability/${pointId}`);
  if (h % 25 === 0) return 'no_data';
  if (h % 20 === 1) return 'stale';
  return 'live';
}

/** How old a stale reading is: two hours and a few minutes. */
export const STALE_AGE_MS = 2 * 60 * 60 * 1000;

/** Time of the last sample a live point reports: a few seconds before `now`, whole seconds. */
export function sampleTime(pointId: string, availability: Availability, now: number): number {
  const h = stableHash(`lag/${pointId}`);
  const lagMs = availability === 'stale' ? STALE_AGE_MS + (h % 600) * 1000 : (2 + (h % 28)) * 1000;
  return Math.floor((now - lagMs) / 1000) * 1000;
}

/** Reference instant of the cumulative counters (metres count up from here). */
const COUNTER_EPOCH_MS = Date.UTC(2026, 0, 1);

export function simulatedValue(
  point: Pick<PointRecord, 'point_id' | 'value_type' | 'simulation'>,
  at: number,
): PointValue {
  const h = stableHash(`value/${point.point_id}`);
  // Each point gets its own period (10 to 60 minutes) and phase, so neighbours do not move in step.
  const periodMs = (10 + (h % 51)) * 60_000;
  const phase = ((h >>> 8) % 1000) / 1000;
  const cycle = at / periodMs + phase;
  return shape(point.simulation, point.value_type, cycle, at);
}

function shape(sim: Simulation, valueType: ValueType, cycle: number, at: number): PointValue {
  switch (sim.kind) {
    case 'toggle':
      return Math.floor(cycle * 2) % 2 === 0;
    case 'states':
      return sim.states[Math.floor(cycle * sim.states.length) % sim.states.length] ?? '';
    case 'counter':
      return round(sim.start + (sim.per_hour * (at - COUNTER_EPOCH_MS)) / 3_600_000, 3);
    case 'wave': {
      const value = sim.base + sim.amplitude * Math.sin(2 * Math.PI * cycle);
      if (valueType === 'integer') return Math.round(value);
      if (valueType === 'boolean') return value >= sim.base;
      if (valueType === 'string') return String(round(value, 2));
      return round(value, 2);
    }
  }
}

function round(value: number, digits: number): number {
  const factor = 10 ** digits;
  return Math.round(value * factor) / factor;
}
