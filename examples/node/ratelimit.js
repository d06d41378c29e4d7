'use strict';
// redis-ratelimit from Node: the package redis-ratelimit-client (clients/node), installed here
// from the clone (`file:../../clients/node`). It has what this example used to hold, and more:
// the typed reply (Decision), the headers, a limiter that remembers refusals locally, a
// middleware for node's http module, the recipe that routes RL.* right in Redis Cluster for
// ioredis and node-redis, every command (RateLimitClient), a store for express-rate-limit and
// a limiter for rate-limiter-flexible (clients/node/README.md). test/*.test.js runs these
// recipes against real servers (`make test-examples`).
//
//   const Redis = require('ioredis');
//   const { Limit, Limiter, fromIoredis, headers } = require('./ratelimit');
//   const perIp = new Limiter(fromIoredis(new Redis()), new Limit('RL.SLIDE', [100, 60000], 'ip'));
//   const d = await perIp.hit('ip:203.0.113.9');  // Decision { allowed: true, limit: 100, ... }
//   headers(d, perIp.limit);                      // [['X-RateLimit-Limit', '100'], ...]
//
// Run as a program, it serves http://127.0.0.1:8080/ limited to 10 requests a minute per
// client address, over the server at RL_URL (default redis://127.0.0.1:6379):
//
//   node ratelimit.js [port]

const rl = require('redis-ratelimit-client');

module.exports = rl;

if (require.main === module) {
  const http = require('node:http');
  const Redis = require('ioredis');
  const { Limit, Limiter, RefusalCache, fromIoredis, rateLimit } = rl;
  const redis = new Redis(process.env.RL_URL || 'redis://127.0.0.1:6379');
  const limiter = new Limiter(fromIoredis(redis), new Limit('RL.SLIDE', [10, 60000], 'ip'), new RefusalCache());
  const handler = (_req, res) => {
    res.writeHead(200, { 'Content-Type': 'text/plain' });
    res.end('hello\n');
  };
  const port = Number(process.argv[2] || 8080);
  http
    .createServer(rateLimit(handler, { limiter, key: (req) => `ip:${req.socket.remoteAddress}` }))
    .listen(port, '127.0.0.1', () => console.log(`http://127.0.0.1:${port}/ (10 requests a minute per address)`));
}
