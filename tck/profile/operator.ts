/**
 * The profile acts as an operator would: through the management API, with its own operator
 * key, so that every decision passes the same validation and workflow Updates as a person's.
 */
import { api, type Answer } from '../../dev/management-api.js';

export type OperatorAnswer = Answer;

type Method = 'GET' | 'POST' | 'PUT' | 'DELETE';

export interface Operator {
  call(method: Method, path: string, body?: unknown): Promise<OperatorAnswer>;
  /** A call that must answer one of `ok`; anything else throws with the answer. */
  expect(method: Method, path: string, body: unknown, ok: number[]): Promise<OperatorAnswer>;
}

export function operatorClient(baseUrl: string, key: string): Operator {
  const call = api(baseUrl, key);
  return {
    call,
    async expect(method, path, body, ok) {
      const answer = await call(method, path, body);
      if (!ok.includes(answer.status)) {
        throw new Error(`${method} ${path} answered ${answer.status}: ${JSON.stringify(answer.body)}`);
      }
      return answer;
    },
  };
}
