import { expect } from 'chai';
import { permits, type PolicyContext } from '../../domain/policy-evaluation.js';
import type { PolicyRules, Constraint } from '../../domain/policy.js';

const ctx: PolicyContext = {
  participantDid: 'did:web:a.example',
  roles: ['researcher'],
  membership: 'active',
  now: new Date('2026-06-01T00:00:00Z'),
  purpose: null,
};
const allow = (...constraints: Constraint[]): PolicyRules => ({
  permissions: [{ action: 'use', constraints }],
  prohibitions: [],
  obligations: [],
});

describe('policy evaluation (domain/policy-evaluation.ts)', () => {
  it('lets a signed-requests condition hold while the mode is not known, and match once it is', () => {
    for (const right of [true, false]) {
      const rules = allow({ left_operand: 'pl:signedRequests', operator: 'eq', right_operand: right });
      expect(permits(rules, ctx), `eq ${right}, mode unknown`).to.equal(true);
      expect(permits(rules, { ...ctx, signedRequests: right }), `eq ${right}, same mode`).to.equal(true);
      expect(permits(rules, { ...ctx, signedRequests: !right }), `eq ${right}, other mode`).to.equal(false);
    }
  });

  it('evaluates participants, roles, membership and time', () => {
    expect(
      permits(
        allow({ left_operand: 'pl:participant', operator: 'isNoneOf', right_operand: ['did:web:a.example'] }),
        ctx,
      ),
    ).to.equal(false);
    expect(
      permits(
        allow({ left_operand: 'pl:role', operator: 'isAnyOf', right_operand: ['operator', 'researcher'] }),
        ctx,
      ),
    ).to.equal(true);
    expect(
      permits(allow({ left_operand: 'pl:membership', operator: 'eq', right_operand: 'active' }), {
        ...ctx,
        membership: null,
      }),
    ).to.equal(false);
    expect(
      permits(
        allow({ left_operand: 'odrl:dateTime', operator: 'lt', right_operand: '2026-01-01T00:00:00Z' }),
        ctx,
      ),
    ).to.equal(false);
    expect(
      permits(
        allow({ left_operand: 'odrl:dateTime', operator: 'gteq', right_operand: '2026-01-01T00:00:00Z' }),
        ctx,
      ),
    ).to.equal(true);
  });

  it('does not let a purpose-bound permission hold before a purpose is known', () => {
    const rules = allow({ left_operand: 'odrl:purpose', operator: 'eq', right_operand: 'research' });
    expect(permits(rules, ctx)).to.equal(false);
    expect(permits(rules, { ...ctx, purpose: 'research' })).to.equal(true);
  });
});
