/**
 * Evaluates a policy for a participant: a permission applies when every constraint of it
 * holds; a prohibition whose constraints hold for the same action wins over permissions.
 * Purpose constraints hold only when a purpose is known and matches (at catalog time there is
 * none, so a purpose-bound permission does not make an offer visible).
 */
import type { Constraint, PolicyRules, Rule } from './policy.js';

export interface PolicyContext {
  participantDid: string;
  roles: string[];
  /** 'active' for an active member of the data space. */
  membership: string | null;
  now: Date;
  purpose: string | null;
  signedRequests?: boolean;
}

function holds(c: Constraint, ctx: PolicyContext): boolean {
  const values = (v: Constraint['right_operand']) => (Array.isArray(v) ? v : [String(v)]);
  const subjectValues = (): string[] | null => {
    switch (c.left_operand) {
      case 'pl:participant':
        return [ctx.participantDid];
      case 'pl:role':
        return ctx.roles;
      case 'pl:membership':
        return ctx.membership ? [ctx.membership] : [];
      case 'odrl:purpose':
        return ctx.purpose ? [ctx.purpose] : null;
      default:
        return null;
    }
  };
  if (c.left_operand === 'odrl:dateTime') {
    const t = Date.parse(String(c.right_operand));
    const n = ctx.now.getTime();
    switch (c.operator) {
      case 'lt':
        return n < t;
      case 'lteq':
        return n <= t;
      case 'gt':
        return n > t;
      case 'gteq':
        return n >= t;
      default:
        return n === t;
    }
  }
  // How requests are made, not who makes them: when the mode is not known yet (catalog, contract
  // request) the participant can comply either way; once known, it must match.
  if (c.left_operand === 'pl:signedRequests') {
    return ctx.signedRequests === undefined || ctx.signedRequests === c.right_operand;
  }
  const subject = subjectValues();
  if (subject === null) return false;
  const wanted = values(c.right_operand);
  const any = subject.some((s) => wanted.includes(s));
  return c.operator === 'isNoneOf' ? !any : any;
}

const ruleHolds = (rule: Rule, ctx: PolicyContext) => rule.constraints.every((c) => holds(c, ctx));

/** Whether the policy permits `action` (or `use`, which covers every action) for the context. */
export function permits(rules: PolicyRules, ctx: PolicyContext, action = 'use'): boolean {
  const covers = (r: Rule) => r.action === action || r.action === 'use';
  if (rules.prohibitions.some((r) => covers(r) && ruleHolds(r, ctx))) return false;
  return rules.permissions.some((r) => covers(r) && ruleHolds(r, ctx));
}
