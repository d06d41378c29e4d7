'use strict';
// An Express app limited by express-rate-limit on RateLimitStore. Imported by the tests, and
// run as a process of its own (`node test/app.js '<json options>'`), which prints the port it
// listens on: the second process sharing a limit through Redis.
//
//   GET /      200 "hello"
//   GET /fail  500 (for skipFailedRequests)
const express = require('express');
const { rateLimit } = require('express-rate-limit');
const { RateLimitStore } = require('../express-rate-limit');

/**
 * @param {object} o
 * @param {object} o.client the Redis client (ioredis or node-redis)
 * @param {string} o.key every request's key (keyGenerator)
 * @param {string} o.prefix the store's prefix
 */
function makeApp({ client, key, prefix, limit = 3, windowMs = 60000, ...options }) {
  const store = new RateLimitStore({ client, prefix });
  const limiter = rateLimit({ store, limit, windowMs, keyGenerator: () => key, ...options });
  const app = express();
  app.use(limiter);
  app.get('/', (_req, res) => res.send('hello'));
  app.get('/fail', (_req, res) => res.status(500).send('failed'));
  return { app, store, limiter };
}

/** Listens on a free port of 127.0.0.1; resolves to the http.Server. */
function listen(app) {
  return new Promise((resolve) => {
    const server = app.listen(0, '127.0.0.1', () => resolve(server));
  });
}

module.exports = { makeApp, listen };

if (require.main === module) {
  (async () => {
    const o = JSON.parse(process.argv[2]);
    let client;
    if (o.library === 'node-redis') {
      client = await require('redis').createClient({ url: o.url }).connect();
    } else {
      const Redis = require('ioredis');
      client = new Redis(o.url);
    }
    const { app } = makeApp({ client, ...o.options });
    const server = await listen(app);
    process.stdout.write(`${server.address().port}\n`);
    process.on('SIGTERM', () => process.exit(0));
  })().catch((err) => {
    console.error(err);
    process.exit(1);
  });
}
