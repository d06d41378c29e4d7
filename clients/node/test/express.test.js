'use strict';
// express-rate-limit on RateLimitStore, over real HTTP: the 429 at exactly the (limit+1)-th
// request, the legacy and draft-7/draft-8 headers, a second app process sharing the limit,
// skipFailedRequests (decrement), resetKey and the window's end.
const test = require('node:test');
const assert = require('node:assert/strict');
const { spawn } = require('node:child_process');
const path = require('node:path');
const readline = require('node:readline');
const Redis = require('ioredis');
const { createClient } = require('redis');
const { makeApp, listen } = require('./app');
const { COUNT_ALL } = require('../express-rate-limit');
const { startServer, fresh, waitFor, calls } = require('./helpers');

let server;
let io;
let nr;
test.before(async () => {
  server = await startServer();
  io = new Redis(server.port);
  nr = await createClient({ url: server.url }).connect();
});
test.after(async () => {
  io.disconnect();
  await nr.quit();
  await server.stop();
});

const clientOf = (library) => (library === 'ioredis' ? io : nr);

async function serve(options) {
  const made = makeApp(options);
  const http = await listen(made.app);
  const url = `http://127.0.0.1:${http.address().port}`;
  const get = async (p = '/') => {
    const r = await fetch(url + p);
    await r.text();
    return r;
  };
  return { ...made, http, url, get, close: () => new Promise((resolve) => http.close(resolve)) };
}

for (const library of ['ioredis', 'node-redis']) {
  test(`${library}: 429 at exactly the (limit+1)-th request, with the legacy headers`, async () => {
    const key = fresh('ip');
    const app = await serve({ client: clientOf(library), key, prefix: 'erl:', limit: 3, windowMs: 60000, legacyHeaders: true, standardHeaders: false });
    try {
      const statuses = [];
      const remaining = [];
      let last;
      for (let i = 0; i < 6; i++) {
        last = await app.get();
        statuses.push(last.status);
        remaining.push(last.headers.get('x-ratelimit-remaining'));
        assert.equal(last.headers.get('x-ratelimit-limit'), '3');
      }
      assert.deepEqual(statuses, [200, 200, 200, 429, 429, 429]);
      assert.deepEqual(remaining, ['2', '1', '0', '0', '0', '0']);
      // X-RateLimit-Reset is the window's end in Unix seconds: the module's stored end.
      const end = Number(await io.call('PEXPIRETIME', `erl:${key}`));
      const reset = Number(last.headers.get('x-ratelimit-reset'));
      assert.ok(Math.abs(reset - Math.ceil(end / 1000)) <= 1, `reset ${reset}, window end ${end}`);
      const retry = Number(last.headers.get('retry-after'));
      assert.ok(retry >= 59 && retry <= 60, `Retry-After ${retry}`);
      // The store counted every request, the refused ones too, as express-rate-limit expects.
      const info = await app.store.get(key);
      assert.equal(info.totalHits, 6);
      assert.ok(info.resetTime instanceof Date);
      assert.equal((await io.call('RL.PEEK', `erl:${key}`))[1], COUNT_ALL);
    } finally {
      await app.close();
    }
  });
}

test('draft-7 headers: RateLimit-Policy and RateLimit from the store\'s count and reset', async () => {
  const key = fresh('ip');
  const app = await serve({ client: io, key, prefix: 'erl:', limit: 2, windowMs: 30000, standardHeaders: 'draft-7', legacyHeaders: false });
  try {
    const first = await app.get();
    assert.equal(first.headers.get('ratelimit-policy'), '2;w=30');
    assert.equal(first.headers.get('ratelimit'), 'limit=2, remaining=1, reset=30');
    assert.equal(first.headers.get('x-ratelimit-limit'), null);
    await app.get();
    const refused = await app.get();
    assert.equal(refused.status, 429);
    assert.match(refused.headers.get('ratelimit'), /^limit=2, remaining=0, reset=(29|30)$/);
    assert.match(refused.headers.get('retry-after'), /^(29|30)$/);
  } finally {
    await app.close();
  }
});

test('draft-8 headers: the named policy and its partition key', async () => {
  const key = fresh('ip');
  const app = await serve({ client: nr, key, prefix: 'erl:', limit: 2, windowMs: 60000, standardHeaders: 'draft-8', legacyHeaders: false, identifier: 'api' });
  try {
    const first = await app.get();
    assert.match(first.headers.get('ratelimit-policy'), /^"api"; q=2; w=60; pk=:[A-Za-z0-9+/=]+:$/);
    assert.equal(first.headers.get('ratelimit'), '"api"; r=1; t=60');
    await app.get();
    const refused = await app.get();
    assert.equal(refused.status, 429);
    assert.match(refused.headers.get('ratelimit'), /^"api"; r=0; t=(59|60)$/);
  } finally {
    await app.close();
  }
});

/** Starts test/app.js in a process of its own; resolves to { url, stop }. */
async function second(options) {
  const child = spawn(process.execPath, [path.join(__dirname, 'app.js'), JSON.stringify(options)], {
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const exited = new Promise((resolve) => child.once('exit', resolve));
  const lines = readline.createInterface({ input: child.stdout });
  const port = await Promise.race([
    new Promise((resolve) => lines.once('line', resolve)),
    exited.then(() => {
      throw new Error('the second app exited before listening');
    }),
    new Promise((_, reject) => setTimeout(() => reject(new Error('the second app did not listen within 20 s')), 20000).unref()),
  ]);
  const stop = async () => {
    child.kill('SIGTERM');
    await exited;
  };
  return { url: `http://127.0.0.1:${Number(port)}`, stop };
}

test('a second process (another app, node-redis, same Redis) shares the limit', async () => {
  const key = fresh('ip');
  const a = await serve({ client: io, key, prefix: 'shared:', limit: 4, windowMs: 60000 });
  const b = await second({ url: server.url, library: 'node-redis', options: { key, prefix: 'shared:', limit: 4, windowMs: 60000 } });
  try {
    const statuses = [];
    for (let i = 0; i < 6; i++) {
      const r = await fetch(i % 2 === 0 ? a.url : b.url);
      await r.text();
      statuses.push([i % 2 === 0 ? 'a' : 'b', r.status, r.headers.get('x-ratelimit-remaining')]);
    }
    assert.deepEqual(statuses, [
      ['a', 200, '3'],
      ['b', 200, '2'],
      ['a', 200, '1'],
      ['b', 200, '0'],
      ['a', 429, '0'],
      ['b', 429, '0'],
    ]);
  } finally {
    await a.close();
    await b.stop();
  }
});

test('skipFailedRequests: a failed request is taken back with RL.REFUND (decrement)', async () => {
  const key = fresh('ip');
  const app = await serve({ client: io, key, prefix: 'erl:', limit: 2, windowMs: 60000, skipFailedRequests: true });
  try {
    const refunds = await calls(io, 'rl.refund');
    assert.equal((await app.get('/fail')).status, 500);
    // express-rate-limit decrements when the response has finished: wait for the refund.
    await waitFor('the refund', async () => (await calls(io, 'rl.refund')) === refunds + 1);
    assert.equal(await app.store.get(key), undefined, 'a window counted down to zero ends');
    assert.equal((await app.get()).status, 200);
    assert.equal((await app.get()).status, 200);
    const refused = await app.get();
    assert.equal(refused.status, 429);
    // A 429 is a failed request too: taken back.
    await waitFor('the refund of the 429', async () => (await calls(io, 'rl.refund')) === refunds + 2);
    assert.equal((await app.store.get(key)).totalHits, 2);
  } finally {
    await app.close();
  }
});

test('resetKey (DEL) and the window\'s end: requests pass again', async () => {
  const key = fresh('ip');
  const app = await serve({ client: nr, key, prefix: 'erl:', limit: 1, windowMs: 1000 });
  try {
    assert.equal((await app.get()).status, 200);
    assert.equal((await app.get()).status, 429);
    await app.limiter.resetKey(key);
    await waitFor('the key to be deleted', async () => (await io.exists(`erl:${key}`)) === 0);
    assert.equal((await app.get()).status, 200);
    const refused = await app.get();
    assert.equal(refused.status, 429);
    // The window ends 1 s after the request that opened it: poll until a request passes.
    const t0 = Date.now();
    await waitFor('the window to end', async () => (await app.get()).status === 200, 3000);
    assert.ok(Date.now() - t0 <= 1100, `passed again ${Date.now() - t0} ms after the refusal`);
  } finally {
    await app.close();
  }
});

test('a windowMs the module cannot hold is refused (and logged by express-rate-limit)', async () => {
  const { RateLimitStore } = require('../express-rate-limit');
  const store = new RateLimitStore({ client: io });
  assert.throws(() => store.init({ windowMs: 0 }), RangeError);
  await assert.rejects(store.increment('k'), RangeError);
  assert.throws(() => store.init({ windowMs: 32 * 86400000 }), /31 days/);
});
