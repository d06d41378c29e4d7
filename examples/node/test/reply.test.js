'use strict';
// The typed reply and the header recipe, through ioredis and node-redis on one server.
const test = require('node:test');
const assert = require('node:assert/strict');
const Redis = require('ioredis');
const { createClient } = require('redis');
const { Decision, Limit, Limiter, headers, fromIoredis, fromNodeRedis } = require('../ratelimit');
const { URL, fresh } = require('./helpers');

const asMap = (pairs) => Object.fromEntries(pairs);

test('ioredis and node-redis give the same typed replies and headers', async () => {
  const io = new Redis(URL);
  const nr = await createClient({ url: URL }).connect();
  try {
    for (const [name, send] of [['ioredis', fromIoredis(io)], ['node-redis', fromNodeRedis(nr)]]) {
      const limit = new Limit('RL.SLIDE', [3, 1000]);
      const lim = new Limiter(send, limit);
      const key = fresh(`node:${name}`);
      const got = [];
      for (let i = 0; i < 4; i++) got.push(await lim.hit(key));
      assert.deepEqual(got.map((d) => d.allowed), [true, true, true, false], name);
      assert.deepEqual(got.map((d) => d.remaining), [2, 1, 0, 0], name);
      const refused = got[3];
      assert.ok(refused.retryAfterMs > 0 && refused.retryAfterMs <= 1000, name);
      assert.equal(refused.retryAfterS, 1, 'rounded up, never down');
      const h = asMap(headers(refused, limit));
      assert.equal(h['X-RateLimit-Limit'], '3');
      assert.equal(h['X-RateLimit-Remaining'], '0');
      assert.equal(h['X-RateLimit-Reset'], '1');
      assert.equal(h['Retry-After'], '1');
      assert.equal(h['RateLimit-Policy'], '"default";q=3;w=1');
      assert.equal(h.RateLimit, '"default";r=0;t=1');
      assert.equal(asMap(headers(got[0], limit))['Retry-After'], undefined);
    }
  } finally {
    io.disconnect();
    await nr.quit();
  }
});

test('Retry-After rounds up, never, several windows, the leaky delay, peek/refund/charge', async () => {
  const io = new Redis(URL);
  try {
    const send = fromIoredis(io);

    const fixed = new Limiter(send, new Limit('RL.FIXED', [1, 1500]));
    const fk = fresh('node:fixed');
    await fixed.hit(fk);
    const f = await fixed.hit(fk);
    assert.ok(f.retryAfterMs > 1000 && f.retryAfterMs <= 1500);
    assert.equal(asMap(headers(f, fixed.limit))['Retry-After'], '2');

    const big = new Limit('RL.SLIDE', [10, 1000]);
    const never = await new Limiter(send, big).hit(fresh('node:big'), 11);
    assert.deepEqual(never, new Decision(false, 10, 10, -1, 0));
    assert.ok(never.never);
    const nh = asMap(headers(never, big));
    assert.equal(nh['Retry-After'], undefined);
    assert.equal(nh.RateLimit, '"default";r=10');

    const two = new Limit('RL.SLIDE', [2, 1000, 5, 60000], 'api');
    const tl = new Limiter(send, two);
    const tk = fresh('node:two');
    const first = await tl.hit(tk);
    const th = asMap(headers(first, two));
    assert.equal(th['RateLimit-Policy'], '"api-1000ms";q=2;w=1, "api-60000ms";q=5;w=60');
    assert.equal(th.RateLimit, '"api-1000ms";r=1;t=60');

    const leaky = new Limiter(send, new Limit('RL.LEAKY', [4, 1000]));
    const lk = fresh('node:leaky');
    const [a, b] = [await leaky.hit(lk), await leaky.hit(lk)];
    assert.equal(a.delayMs, 0);
    assert.ok(b.allowed && b.delayMs > 0 && b.delayMs <= 250);
    assert.equal(b.limit, 5);

    const token = new Limiter(send, new Limit('RL.TOKEN', [10, 60000]));
    const k = fresh('node:token');
    assert.equal(await token.peek(k), null);
    await token.hit(k, 4);
    assert.equal((await token.peek(k)).remaining, 6);
    assert.equal((await token.charge(k, 10)).remaining, 0);
    assert.equal((await token.refund(k, 7)).remaining, 3);
  } finally {
    io.disconnect();
  }
});

test('RL.ALL: the first five fields, then each limiter in parts', async () => {
  const io = new Redis(URL);
  try {
    const tag = fresh('{node:all}');
    const reply = await io.call('RL.ALL', 2, `${tag}:rpm`, `${tag}:tpm`, 'SLIDE', 2, 60000, 'TOKEN', 10, 60000, 'COST', 3);
    const d = Decision.fromReply(reply);
    assert.deepEqual([d.allowed, d.limit, d.remaining], [true, 2, 1]);
    assert.deepEqual(d.parts.map((p) => [p.limit, p.remaining]), [[2, 1], [10, 7]]);
    assert.throws(() => Decision.fromReply([1, 2, 3]), TypeError);
    // Rate and concurrency: an ACQUIRE entry carries its lease id.
    const both = Decision.fromReply(
      await io.call('RL.ALL', 2, `${tag}:rpm`, `${tag}:jobs`, 'SLIDE', 2, 60000, 'ACQUIRE', 1, 30000),
    );
    assert.equal(both.allowed, true);
    assert.equal(both.parts[0].leaseId, null);
    assert.ok(both.parts[1].leaseId);
    assert.equal(Decision.fromReply(await io.call('RL.RELEASE', `${tag}:jobs`, both.parts[1].leaseId)).allowed, true);
  } finally {
    io.disconnect();
  }
});

test('ioredis keyPrefix is applied to RL.* keys by the sender', async () => {
  const io = new Redis(URL, { keyPrefix: 'tenant-a:' });
  const plain = new Redis(URL);
  try {
    const key = fresh('node:prefix');
    await new Limiter(fromIoredis(io), new Limit('RL.TOKEN', [5, 1000])).hit(key);
    assert.equal(await plain.type(`tenant-a:${key}`), 'ratelimit');
    assert.equal(await plain.exists(key), 0);
  } finally {
    io.disconnect();
    plain.disconnect();
  }
});
