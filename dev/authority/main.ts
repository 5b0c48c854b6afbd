/**
 * Runs the authority stand-in on its own:
 *
 *   PORT=8099 AUTHORITY_ADMIN_TOKEN=secret AUTHORITY_MEMBERS=members.json npx tsx dev/authority/main.ts
 *
 * PORT defaults to 0 (any free port; the URL is printed). AUTHORITY_MEMBERS optionally names a
 * JSON file with a list of members ({did, name, roles, active}) to start with.
 */
import fs from 'node:fs';
import { startAuthority, type AuthorityMember } from './index.js';

const port = Number(process.env.PORT ?? 0);
const host = process.env.HOST ?? '127.0.0.1';
const membersFile = process.env.AUTHORITY_MEMBERS;
const members = membersFile ? (JSON.parse(fs.readFileSync(membersFile, 'utf8')) as AuthorityMember[]) : [];

const authority = await startAuthority(
  { members, adminToken: process.env.AUTHORITY_ADMIN_TOKEN || undefined },
  port,
  host,
);
console.log(`authority stand-in on ${authority.url} (${members.length} members)`);
console.log(
  `  admin API: ${authority.url}/admin/v1/members  (Authorization: Bearer ${authority.adminToken})`,
);

const stop = (): void => {
  void authority.close().then(() => process.exit(0));
};
process.once('SIGINT', stop);
process.once('SIGTERM', stop);
