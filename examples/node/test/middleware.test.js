'use strict';
// The http middleware: 429 with the headers over real HTTP, and how many requests of a flood
// reach Redis with and without the local refusal cache.
const test = require('node:test');
const assert = require('node:assert/strict');
const http = require('node:http');
const Redis = require('ioredis');
const { Limit, Limiter, RefusalCache, fromIoredis, rateLimit } = require('../ratelimit');
const { URL, fresh, calls } = require('./helpers');

const FLOOD = 300;
const LIMIT = 10;

async function serve(limiter, key) {
  const handler = (req, res) => {
    res.writeHead(200, { 'Content-Type': 'text/plain' });
    res.end('hello\n');
  };
  const server = http.createServer(rateLimit(handler, { limiter, key: () => key }));
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  return server;
}

const get = (server) => fetch(`http://127.0.0.1:${server.address().port}/`);

test('answers 429 with Retry-After and the RateLimit fields', async () => {
  const io = new Redis(URL);
  const server = await serve(new Limiter(fromIoredis(io), new Limit('RL.SLIDE', [2, 60000], 'ip')), fresh('node:http'));
  try {
    for (const remaining of ['1', '0']) {
      const r = await get(server);
      assert.equal(r.status, 200);
      assert.equal(r.headers.get('x-ratelimit-remaining'), remaining);
      assert.equal(r.headers.get('ratelimit-policy'), '"ip";q=2;w=60');
      await r.text();
    }
    const refused = await get(server);
    assert.equal(refused.status, 429);
    assert.equal(refused.headers.get('retry-after'), '60');
    assert.equal(refused.headers.get('ratelimit'), '"ip";r=0;t=60');
    await refused.text();
  } finally {
    server.close();
    io.disconnect();
  }
});

test('a flood: requests that reach Redis with and without the refusal cache', async () => {
  const io = new Redis(URL);
  const counts = {};
  try {
    for (const [name, cache] of [['without', null], ['with', new RefusalCache()]]) {
      const limiter = new Limiter(fromIoredis(io), new Limit('RL.SLIDE', [LIMIT, 60000]), cache);
      const server = await serve(limiter, fresh('node:flood'));
      const before = await calls(io, 'RL.SLIDE');
      const statuses = [];
      for (let i = 0; i < FLOOD; i++) {
        const r = await get(server);
        statuses.push(r.status);
        await r.text();
      }
      server.close();
      assert.equal(statuses.filter((s) => s === 200).length, LIMIT);
      assert.equal(statuses.filter((s) => s === 429).length, FLOOD - LIMIT);
      counts[name] = (await calls(io, 'RL.SLIDE')) - before;
    }
  } finally {
    io.disconnect();
  }
  console.error(
    `  node http, ${FLOOD} requests on a limit of ${LIMIT}: ${counts.without} reached Redis ` +
      `without the refusal cache, ${counts.with} with it`,
  );
  assert.equal(counts.without, FLOOD);
  assert.equal(counts.with, LIMIT + 1);
});

test('RL.LEAKY: an allowed request waits its delay before the handler runs', async () => {
  const io = new Redis(URL);
  const server = await serve(new Limiter(fromIoredis(io), new Limit('RL.LEAKY', [10, 1000])), fresh('node:leaky'));
  try {
    const t0 = performance.now();
    const replies = await Promise.all([get(server), get(server), get(server)]);
    const elapsed = performance.now() - t0;
    assert.deepEqual(replies.map((r) => r.status), [200, 200, 200]);
    await Promise.all(replies.map((r) => r.text()));
    assert.ok(elapsed >= 190, `three bookings at 10 per second take 200 ms, took ${elapsed}`);
  } finally {
    server.close();
    io.disconnect();
  }
});
