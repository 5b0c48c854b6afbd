/**
 * Search attributes our workflows set, registered when the dev server starts
 * (`--search-attribute`) so the Temporal UI can list and filter processes by them.
 */
export const SEARCH_ATTRIBUTES = [
  { name: 'ConnectorProcess', type: 'Keyword' },
  { name: 'ConnectorRole', type: 'Keyword' },
  { name: 'ConnectorState', type: 'Keyword' },
  { name: 'Counterparty', type: 'Keyword' },
] as const;
