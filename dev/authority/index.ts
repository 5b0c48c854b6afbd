/** Public face of the authority stand-in, for the demo and tests (API: docs/authority.md). */
export {
  createAuthorityApp,
  startAuthority,
  type AuthorityMember,
  type AuthorityOptions,
  type RunningAuthority,
} from './server.js';
