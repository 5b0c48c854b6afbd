/** "Masked means shown as six bullet characters" (spec, Conventions). */
export const MASK = '\u2022'.repeat(6);

export const mask = (secret: string | null | undefined): string | null =>
  secret === null || secret === undefined ? null : MASK;

export const isMasked = (value: unknown): boolean => value === MASK;

/**
 * A key sent back masked keeps the stored key; anything else replaces it.
 * Returns undefined when a masked value has nothing stored behind it.
 */
export function keepOrReplace(incoming: string | null | undefined, stored: string | null | undefined) {
  if (isMasked(incoming)) return stored ?? undefined;
  return incoming ?? null;
}
