/**
 * One hop of the floor of bench/gateway.ts: the least any HTTP proxy written in Node does per
 * request, so that the gateway's figures can be read against what two Node hops cost on the same
 * machine at all. It parses the request, sends it upstream on an undici Pool (the client the
 * gateway and the data plane use), reads the whole answer (the data plane must, to check it) and
 * sends it on with its length. No authentication, no lookup, no JSON, no logging.
 *
 * Started with `fork` (IPC); environment:
 *   BENCH_PROXY_ROUTES       JSON [[prefix, upstream origin, upstream prefix], …]: a request path
 *                            starting with prefix goes to origin + upstream prefix + the rest
 *   BENCH_PROXY_HEADERS      JSON object of headers added upstream (the backend's key)
 *   BENCH_PROXY_CONNECTIONS  connections per upstream pool
 * Sends { ready: true, url } when listening; exits when the parent goes.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { Pool } from 'undici';

interface Route {
  prefix: string;
  pool: Pool;
  upstreamPrefix: string;
}

const routes: Route[] = (
  JSON.parse(process.env.BENCH_PROXY_ROUTES ?? '[]') as Array<[string, string, string]>
).map(([prefix, origin, upstreamPrefix]) => ({
  prefix,
  upstreamPrefix,
  pool: new Pool(origin, { connections: Number(process.env.BENCH_PROXY_CONNECTIONS ?? 32) }),
}));
const added = JSON.parse(process.env.BENCH_PROXY_HEADERS ?? '{}') as Record<string, string>;
if (!process.send || routes.length === 0) {
  process.stderr.write('gateway-floor-proxy: fork me with BENCH_PROXY_ROUTES\n');
  process.exit(2);
}

async function forward(route: Route, req: http.IncomingMessage, res: http.ServerResponse) {
  const upstream = await route.pool.request({
    method: 'GET',
    path: route.upstreamPrefix + req.url!.slice(route.prefix.length),
    headers: { ...added, accept: req.headers.accept ?? 'application/json' },
  });
  const chunks: Buffer[] = [];
  for await (const chunk of upstream.body) chunks.push(chunk as Buffer);
  const body = chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks);
  res.writeHead(upstream.statusCode, {
    'content-type': String(upstream.headers['content-type'] ?? 'application/json'),
    'content-length': body.length,
  });
  res.end(body);
}

const server = http.createServer((req, res) => {
  const route = routes.find((r) => req.url!.startsWith(r.prefix));
  if (!route) {
    res.writeHead(404).end();
    return;
  }
  forward(route, req, res).catch(() => {
    if (!res.headersSent) res.writeHead(502);
    res.end();
  });
});
server.listen(0, '127.0.0.1', () => {
  const { port } = server.address() as AddressInfo;
  process.send!({ ready: true, url: `http://127.0.0.1:${port}` });
});

const stop = () => {
  server.close();
  void Promise.all(routes.map((r) => r.pool.close())).finally(() => process.exit(0));
};
process.on('disconnect', stop);
process.on('SIGTERM', stop);
