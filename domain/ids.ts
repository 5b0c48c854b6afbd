/**
 * Ids made from names (sources from their name, products and policies from their title):
 * lower case, accents dropped, anything but letters and digits folded into single dashes.
 */
export function idFromName(name: string, maxLength = 64): string {
  return name
    .normalize('NFKD')
    .replace(/[\u0300-\u036f]/g, '')
    .toLowerCase()
    .replace(/[^a-z0-9]+/g, '-')
    .replace(/^-+|-+$/g, '')
    .slice(0, maxLength)
    .replace(/-+$/g, '');
}

/** What a resource id may look like when a caller chooses it. */
export const RESOURCE_ID_PATTERN = /^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$/;
