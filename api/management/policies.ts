/** Policies: permissions, prohibitions and obligations with constraints; their ODRL form and a sentence for people. */
import Joi from 'joi';
import { randomUUID } from 'node:crypto';
import { route } from '../routes.js';
import type { Services } from '../services.js';
import { idParams, pageOf, pageQuery, resourceId, toPageRequest } from './schemas.js';
import { dateTime, nullableString } from '../validation.js';
import { conflict, invalidRequest, notFound } from '../../domain/errors.js';
import { idFromName } from '../../domain/ids.js';
import {
  ACTIONS,
  LEFT_OPERANDS,
  OPERATORS,
  constraintProblem,
  summarize,
  toOdrl,
  type Rule,
} from '../../domain/policy.js';
import { policyStore, type PolicyRecord } from '../../db/policies.js';
import { isUniqueViolation } from '../../db/paging.js';

interface PolicyInput {
  id?: string | null;
  title?: string | null;
  description?: string | null;
  permissions?: Rule[];
  prohibitions?: Rule[];
  obligations?: Rule[];
}

const constraint = Joi.object({
  left_operand: Joi.string()
    .valid(...LEFT_OPERANDS)
    .required(),
  operator: Joi.string()
    .valid(...OPERATORS)
    .required(),
  right_operand: Joi.alternatives()
    .try(Joi.string(), Joi.array().items(Joi.string().min(1)), Joi.boolean())
    .required()
    .messages({ 'alternatives.match': 'must be a string, a list of strings, a date-time or a boolean' }),
});

const rule = Joi.object({
  action: Joi.string()
    .valid(...ACTIONS)
    .required(),
  constraints: Joi.array().items(constraint).default([]),
});

const policyBody = Joi.object({
  id: resourceId().allow(null),
  title: nullableString(),
  description: nullableString(),
  permissions: Joi.array().items(rule).default([]),
  prohibitions: Joi.array().items(rule).default([]),
  obligations: Joi.array().items(rule).default([]),
});

const policyOutput = Joi.object({
  id: Joi.string().required(),
  title: Joi.string().allow(null),
  description: Joi.string().allow(null),
  permissions: Joi.array().items(rule),
  prohibitions: Joi.array().items(rule),
  obligations: Joi.array().items(rule),
  odrl: Joi.object().unknown(true).required(),
  summary: Joi.string().required(),
  created_at: dateTime(),
});

export function presentPolicy(p: PolicyRecord) {
  return {
    id: p.id,
    title: p.title,
    description: p.description,
    permissions: p.permissions,
    prohibitions: p.prohibitions,
    obligations: p.obligations,
    odrl: toOdrl(p.id, p),
    summary: summarize(p),
    created_at: p.created_at,
  };
}

function checkConstraints(body: Required<Pick<PolicyInput, 'permissions' | 'prohibitions' | 'obligations'>>) {
  for (const kind of ['permissions', 'prohibitions', 'obligations'] as const) {
    body[kind].forEach((r, i) =>
      r.constraints.forEach((c, j) => {
        const problem = constraintProblem(c);
        if (problem) throw invalidRequest(problem, `${kind}[${i}].constraints[${j}]`);
      }),
    );
  }
}

export function policyRoutes(services: Services) {
  const { db } = services;
  return [
    route<
      never,
      never,
      Required<Pick<PolicyInput, 'permissions' | 'prohibitions' | 'obligations'>> & PolicyInput
    >({
      method: 'post',
      path: '/policies',
      summary: 'Create a policy',
      tag: 'policies',
      role: 'operator',
      body: policyBody,
      response: policyOutput,
      status: 201,
      errors: ['conflict'],
      async handler({ body }) {
        checkConstraints(body);
        const id = body.id ?? ((body.title && idFromName(body.title)) || `policy-${randomUUID()}`);
        try {
          return presentPolicy(
            await policyStore(db).insert({
              id,
              title: body.title ?? null,
              description: body.description ?? null,
              permissions: body.permissions,
              prohibitions: body.prohibitions,
              obligations: body.obligations,
            }),
          );
        } catch (err) {
          if (isUniqueViolation(err)) throw conflict(`a policy with id '${id}' already exists`);
          throw err;
        }
      },
    }),
    route<never, { cursor?: string; limit: number }>({
      method: 'get',
      path: '/policies',
      summary: 'List policies',
      tag: 'policies',
      role: 'viewer',
      query: pageQuery,
      response: pageOf(policyOutput),
      async handler({ query }) {
        const page = await policyStore(db).list(toPageRequest(query));
        return { items: page.items.map(presentPolicy), next_cursor: page.next_cursor };
      },
    }),
    route<{ id: string }>({
      method: 'get',
      path: '/policies/:id',
      summary: 'Read a policy with its ODRL form and summary',
      tag: 'policies',
      role: 'viewer',
      params: idParams,
      response: policyOutput,
      async handler({ params }) {
        const policy = await policyStore(db).get(params.id);
        if (!policy) throw notFound('policy', params.id);
        return presentPolicy(policy);
      },
    }),
  ];
}
