/**
 * The management API as our tools call it (the benches, the TCK profile's operator): one function
 * per connector and key, answers parsed when JSON, 30 s per call.
 */
export interface Answer {
  status: number;
  // eslint-disable-next-line @typescript-eslint/no-explicit-any -- callers read answers of every shape
  body: any;
}

export type Api = (method: string, p: string, body?: unknown) => Promise<Answer>;

export function api(baseUrl: string, key: string): Api {
  return async (method, p, body) => {
    const res = await fetch(`${baseUrl}${p}`, {
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
      parsed = text ? JSON.parse(text) : undefined;
    } catch {
      // not JSON: keep the text
    }
    return { status: res.status, body: parsed };
  };
}

/** The answer, when its status is one of `statuses`; else an error naming `what` and the answer. */
export async function expectStatus(what: string, answer: Promise<Answer>, ...statuses: number[]) {
  const a = await answer;
  if (!statuses.includes(a.status))
    throw new Error(`${what}: expected ${statuses.join(' or ')}, got ${a.status}: ${JSON.stringify(a.body)}`);
  return a;
}
