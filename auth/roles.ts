/**
 * Roles of management callers. Each operation needs a minimum role; a higher role may do
 * everything a lower one may (docs/api-keys.md has the table per operation).
 * - viewer: reads everything (lists, single reads, evidence verification).
 * - operator: runs the catalog and the processes (sources, products, offers, policies,
 *   negotiation and transfer decisions, source tests).
 * - admin: all of the above plus API keys and settings.
 */
export const ROLES = ['viewer', 'operator', 'admin'] as const;
export type Role = (typeof ROLES)[number];

export const roleAtLeast = (have: string, need: Role): boolean => {
  const h = ROLES.indexOf(have as Role);
  return h >= 0 && h >= ROLES.indexOf(need);
};
