/**
 * The profile acts as an operator would: through the management API, with its own operator
 * key, so that every decision passes the same validation and workflow Updates as a person's.
 */
export interface OperatorAnswer {
  status: number;
  // eslint-disable-next-line @typescript-eslint/no-explicit-any -- answers of every resource
  body: any;
}

export interface Operator {
  call(method: 'GET' | 'POST' | 'PUT' | 'DELETE', path: string, body?: unknown): Promise<OperatorAnswer>;
  /** A call that must answer one of `ok`; anything else throws with the answer. */
  expect(
    method: 'GET' | 'POST' | 'PUT' | 'DELETE',
    path: string,
    body: unknown,
    ok: number[],
  ): Promise<OperatorAnswer>;
}

export function operatorClient(baseUrl: string, key: string): Operator {
  async function call(method: string, path: string, body?: unknown): Promise<OperatorAnswer> {
    const res = await fetch(`${baseUrl}${path}`, {
      method,
      headers: {
        authorization: `Bearer ${key}`,
        ...(body === undefined ? {} : { 'content-type': 'application/json' }),
      },
      body: body === undefined ? undefined : JSON.stringify(body),
      signal: AbortSignal.timeout(30_000),
    });
    const text = await res.text();
    let parsed: unknown = text;
    try {
      parsed = text ? JSON.parse(text) : null;
    } catch {
      // not JSON: keep the text
    }
    return { status: res.status, body: parsed };
  }
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
