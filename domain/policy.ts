/**
 * Policies: rules with constraints over a fixed set of left operands (spec "Policy"), their
 * ODRL form as a catalog shows it, and one readable sentence for people.
 */
import { isRfc3339 } from './time.js';

export const LEFT_OPERANDS = [
  'pl:membership',
  'pl:role',
  'pl:participant',
  'odrl:dateTime',
  'odrl:purpose',
  'pl:signedRequests',
] as const;
export type LeftOperand = (typeof LEFT_OPERANDS)[number];

export const OPERATORS = ['eq', 'isAnyOf', 'isNoneOf', 'lt', 'lteq', 'gt', 'gteq'] as const;
export type Operator = (typeof OPERATORS)[number];

export const ACTIONS = ['use', 'read', 'write'] as const;

export type RightOperand = string | string[] | boolean;

export interface Constraint {
  left_operand: LeftOperand;
  operator: Operator;
  right_operand: RightOperand;
}

export interface Rule {
  action: string;
  constraints: Constraint[];
}

export interface PolicyRules {
  permissions: Rule[];
  prohibitions: Rule[];
  obligations: Rule[];
}

/** The platform's own ODRL vocabulary for the `pl:` left operands. */
export const PL_POLICY_NAMESPACE = 'https://w3id.org/building-data/policy/v1#';
export const DSP_CONTEXT = 'https://w3id.org/dspace/2025/1/context.jsonld';

const ORDERING: readonly Operator[] = ['lt', 'lteq', 'gt', 'gteq'];
const LISTS: readonly Operator[] = ['isAnyOf', 'isNoneOf'];

/**
 * Which operators and right operands each left operand takes. Returns a message for people
 * when the constraint makes no sense, or null when it is valid.
 */
export function constraintProblem(c: Constraint): string | null {
  const isList = Array.isArray(c.right_operand);
  if (LISTS.includes(c.operator)) {
    if (!isList || (c.right_operand as string[]).length === 0)
      return `operator ${c.operator} needs a non-empty list of strings`;
  } else if (isList) {
    return `operator ${c.operator} needs a single value, not a list`;
  }
  switch (c.left_operand) {
    case 'odrl:dateTime': {
      if (isList) return 'odrl:dateTime takes no list operators; use lt, lteq, gt, gteq or eq';
      if (typeof c.right_operand !== 'string' || !isRfc3339(c.right_operand)) {
        return 'odrl:dateTime needs an RFC 3339 date-time as right_operand';
      }
      return null;
    }
    case 'pl:signedRequests':
      if (c.operator !== 'eq' || typeof c.right_operand !== 'boolean') {
        return 'pl:signedRequests takes operator eq and a boolean right_operand';
      }
      return null;
    default:
      if (ORDERING.includes(c.operator)) return `operator ${c.operator} only applies to odrl:dateTime`;
      if (typeof c.right_operand === 'boolean') {
        return `${c.left_operand} needs a string${c.left_operand === 'pl:membership' ? '' : ' or a list of strings'}`;
      }
      if (!isList && (c.right_operand as string).length === 0) return 'right_operand must not be empty';
      return null;
  }
}

function odrlRightOperand(c: Constraint): unknown {
  if (c.left_operand === 'odrl:dateTime') return { '@value': c.right_operand, '@type': 'xsd:dateTime' };
  return c.right_operand;
}

function odrlRule(rule: Rule): Record<string, unknown> {
  const out: Record<string, unknown> = { action: rule.action };
  if (rule.constraints.length > 0) {
    out.constraint = rule.constraints.map((c) => ({
      leftOperand: c.left_operand,
      operator: c.operator,
      rightOperand: odrlRightOperand(c),
    }));
  }
  return out;
}

/** The ODRL form of a policy, compacted against the DSP 2025-1 context as a catalog shows it. */
export function toOdrl(id: string, rules: PolicyRules): Record<string, unknown> {
  return {
    '@context': [DSP_CONTEXT, { pl: PL_POLICY_NAMESPACE }],
    '@id': id,
    '@type': 'Set',
    permission: rules.permissions.map(odrlRule),
    prohibition: rules.prohibitions.map(odrlRule),
    obligation: rules.obligations.map(odrlRule),
  };
}

const listText = (values: string[], joiner = 'or'): string =>
  values.length <= 1 ? (values[0] ?? '') : `${values.slice(0, -1).join(', ')} ${joiner} ${values.at(-1)}`;

const valueText = (v: RightOperand): string => (Array.isArray(v) ? listText(v) : String(v));

const dateText = (v: RightOperand): string => String(v);

/** One clause per constraint, phrased for the rule it sits in. */
function constraintText(c: Constraint): string {
  const v = c.right_operand;
  switch (c.left_operand) {
    case 'pl:membership':
      return c.operator === 'isNoneOf'
        ? `whose membership is not ${valueText(v)}`
        : `with ${valueText(v)} membership`;
    case 'pl:role':
      return c.operator === 'isNoneOf'
        ? `not holding the role ${valueText(v)}`
        : `holding the role ${valueText(v)}`;
    case 'pl:participant':
      return c.operator === 'isNoneOf' ? `other than ${valueText(v)}` : `namely ${valueText(v)}`;
    case 'odrl:purpose':
      return c.operator === 'isNoneOf'
        ? `for any purpose but ${valueText(v)}`
        : `for the purpose ${valueText(v)}`;
    case 'pl:signedRequests':
      return v === true ? 'with signed requests' : 'without signed requests';
    case 'odrl:dateTime':
      switch (c.operator) {
        case 'lt':
          return `until ${dateText(v)}`;
        case 'lteq':
          return `until and including ${dateText(v)}`;
        case 'gt':
          return `after ${dateText(v)}`;
        case 'gteq':
          return `from ${dateText(v)}`;
        default:
          return `at ${dateText(v)}`;
      }
  }
}

const PARTY_OPERANDS: readonly LeftOperand[] = ['pl:membership', 'pl:role', 'pl:participant'];

/** "<who> <verb phrase> <conditions>.": who from the party constraints, conditions from the rest. */
function ruleSentence(rule: Rule, verb: (action: string) => string): string {
  const parties = rule.constraints.filter((c) => PARTY_OPERANDS.includes(c.left_operand));
  const rest = rule.constraints.filter((c) => !PARTY_OPERANDS.includes(c.left_operand));
  const who =
    parties.length === 0 ? 'Any participant' : `Participants ${parties.map(constraintText).join(' and ')}`;
  return `${[who, verb(rule.action), ...rest.map(constraintText)].join(' ')}.`;
}

/** A sentence for people: who may use the data, until when, for which purpose; and what is forbidden or owed. */
export function summarize(rules: PolicyRules): string {
  const sentences: string[] = [];
  if (rules.permissions.length === 0) sentences.push('Nobody is permitted anything.');
  for (const rule of rules.permissions) sentences.push(ruleSentence(rule, (a) => `may ${a} the data`));
  for (const rule of rules.prohibitions) sentences.push(ruleSentence(rule, (a) => `may not ${a} the data`));
  for (const rule of rules.obligations) sentences.push(ruleSentence(rule, (a) => `must ${a}`));
  return sentences.join(' ');
}
