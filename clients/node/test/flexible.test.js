'use strict';
// rate-limiter-flexible on RateLimiterModule: consume, penalty, reward, block, get, delete and
// set with exact RateLimiterRes values, side by side with RateLimiterRedis on the same server,
// over ioredis and node-redis.
const test = require('node:test');
const assert = require('node:assert/strict');
const Redis = require('ioredis');
const { createClient } = require('redis');
const { RateLimiterRedis, RateLimiterRes } = require('rate-limiter-flexible');
const { RateLimiterModule } = require('../rate-limiter-flexible');
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

/** The RateLimiterRes of a call, resolved or rejected: [outcome, {fields}]. */
async function outcome(p) {
  try {
    const res = await p;
    return ['resolved', res === null ? null : res.toJSON()];
  } catch (res) {
    if (!(res instanceof RateLimiterRes)) throw res;
    return ['rejected', res.toJSON()];
  }
}

const res = (remainingPoints, msBeforeNext, consumedPoints, isFirstInDuration) => ({
  remainingPoints,
  msBeforeNext,
  consumedPoints,
  isFirstInDuration,
});

for (const library of ['ioredis', 'node-redis']) {
  const client = () => (library === 'ioredis' ? io : nr);

  test(`${library}: consume, refused consumes counted, and the exact RateLimiterRes`, async () => {
    const rl = new RateLimiterModule({ storeClient: client(), points: 3, duration: 2, keyPrefix: fresh('rlf') });
    const k = 'user';
    assert.deepEqual(await outcome(rl.consume(k)), ['resolved', res(2, 2000, 1, true)]);
    const second = await outcome(rl.consume(k, 2));
    assert.equal(second[0], 'resolved');
    assert.deepEqual({ ...second[1], msBeforeNext: 0 }, res(0, 0, 3, false));
    assert.ok(second[1].msBeforeNext > 1900 && second[1].msBeforeNext <= 2000);
    const refused = await outcome(rl.consume(k));
    assert.equal(refused[0], 'rejected');
    assert.equal(refused[1].consumedPoints, 4, 'a refused consume counts, as RateLimiterRedis counts it');
    assert.equal(refused[1].remainingPoints, 0);
    // One command per consume: RL.FIXED.
    const before = await calls(io, 'rl.fixed');
    await outcome(rl.consume(k));
    assert.equal((await calls(io, 'rl.fixed')) - before, 1);
    // The window ends `duration` after the first consume: then a consume is first again.
    await waitFor('the window to end', async () => (await rl.get(k)) === null, 3000);
    assert.deepEqual(await outcome(rl.consume(k)), ['resolved', res(2, 2000, 1, true)]);
  });

  test(`${library}: penalty (RL.FIXED) and reward (RL.REFUND)`, async () => {
    const rl = new RateLimiterModule({ storeClient: client(), points: 5, duration: 60, keyPrefix: fresh('rlf') });
    const k = 'user';
    // A penalty on a missing key opens the window, as RateLimiterRedis's does.
    assert.deepEqual(await outcome(rl.penalty(k, 2)), ['resolved', res(3, 60000, 2, true)]);
    const c = await outcome(rl.consume(k));
    assert.deepEqual([c[1].consumedPoints, c[1].remainingPoints, c[1].isFirstInDuration], [3, 2, false]);
    const p = await outcome(rl.penalty(k, 3));
    assert.deepEqual([p[0], p[1].consumedPoints, p[1].remainingPoints], ['resolved', 6, 0]);
    assert.equal((await outcome(rl.consume(k)))[0], 'rejected');
    const r = await outcome(rl.reward(k, 4));
    assert.deepEqual([r[0], r[1].consumedPoints, r[1].remainingPoints], ['resolved', 3, 2]);
    assert.ok(r[1].msBeforeNext > 59000 && r[1].msBeforeNext <= 60000, 'the window keeps its end');
    const g = await rl.get(k);
    assert.deepEqual([g.consumedPoints, g.remainingPoints], [3, 2]);
    // Rewarded down to zero: the window ends (the module never goes below empty).
    const zero = await outcome(rl.reward(k, 10));
    assert.deepEqual(zero, ['resolved', res(5, 0, 0, false)]);
    assert.equal(await rl.get(k), null);
  });

  test(`${library}: block(key, s): points + 1 for s seconds, then free`, async () => {
    const rl = new RateLimiterModule({ storeClient: client(), points: 2, duration: 5, keyPrefix: fresh('rlf') });
    const k = 'user';
    await rl.consume(k);
    const blocked = await outcome(rl.block(k, 1));
    assert.deepEqual(blocked, ['resolved', res(0, 1000, 3, false)]);
    const g = await rl.get(k);
    assert.equal(g.consumedPoints, 3);
    assert.ok(g.msBeforeNext > 900 && g.msBeforeNext <= 1000, `${g.msBeforeNext}`);
    const refused = await outcome(rl.consume(k));
    assert.equal(refused[0], 'rejected');
    assert.equal(refused[1].consumedPoints, 4);
    // A block shorter than the duration keeps its own end (the next consume does not stretch
    // it to the duration).
    assert.ok(refused[1].msBeforeNext <= 1000, `${refused[1].msBeforeNext}`);
    const t0 = Date.now();
    await waitFor('the block to end', async () => (await outcome(rl.consume(k)))[0] === 'resolved', 3000);
    assert.ok(Date.now() - t0 <= 1100);
    const after = await rl.get(k);
    assert.equal(after.consumedPoints, 1, 'a new window of its own');
    assert.ok(after.msBeforeNext > 4800 && after.msBeforeNext <= 5000);
    // A block longer than the duration.
    const long = await outcome(rl.block(k, 30));
    assert.deepEqual(long, ['resolved', res(0, 30000, 3, false)]);
    const r = await outcome(rl.consume(k));
    assert.deepEqual([r[0], r[1].consumedPoints], ['rejected', 4]);
    assert.ok(r[1].msBeforeNext > 29000 && r[1].msBeforeNext <= 30000);
  });

  test(`${library}: blockDuration: the consume past points blocks for blockDuration`, async () => {
    const rl = new RateLimiterModule({ storeClient: client(), points: 1, duration: 1, blockDuration: 2, keyPrefix: fresh('rlf') });
    const k = 'user';
    const refused = await outcome(rl.consume(k, 2));
    assert.deepEqual(refused, ['rejected', res(0, 2000, 2, true)]);
    const g = await rl.get(k);
    assert.equal(g.consumedPoints, 2);
    assert.ok(g.msBeforeNext > 1900 && g.msBeforeNext <= 2000);
    const t0 = Date.now();
    await waitFor('the block to end', async () => (await outcome(rl.consume(k)))[0] === 'resolved', 4000);
    const waited = Date.now() - t0;
    assert.ok(waited >= 1800 && waited <= 2100, `free again after ${waited} ms`);
  });

  test(`${library}: get, delete and set`, async () => {
    const rl = new RateLimiterModule({ storeClient: client(), points: 10, duration: 60, keyPrefix: fresh('rlf') });
    assert.equal(await rl.get('u'), null);
    assert.equal(await rl.delete('u'), false);
    await rl.consume('u', 4);
    const got = (await rl.get('u')).toJSON();
    assert.deepEqual({ ...got, msBeforeNext: 0 }, res(6, 0, 4, false));
    assert.ok(got.msBeforeNext > 59000 && got.msBeforeNext <= 60000);
    assert.equal(await rl.delete('u'), true);
    assert.equal(await rl.get('u'), null);
    assert.deepEqual((await rl.set('u', 7, 20)).toJSON(), res(0, 20000, 7, false));
    const g = await rl.get('u');
    assert.deepEqual([g.consumedPoints, g.remainingPoints], [7, 3]);
    assert.ok(g.msBeforeNext > 19000 && g.msBeforeNext <= 20000);
  });
}

test('side by side with RateLimiterRedis: the same RateLimiterRes for the same calls', async () => {
  const prefix = fresh('side');
  const opts = { points: 4, duration: 10, blockDuration: 20 };
  const ours = new RateLimiterModule({ storeClient: io, keyPrefix: `${prefix}-module`, ...opts });
  const theirs = new RateLimiterRedis({ storeClient: io, keyPrefix: `${prefix}-redis`, ...opts });
  const steps = [
    ['consume', 'a'],
    ['consume', 'a', 2],
    ['get', 'a'],
    ['penalty', 'a', 1],
    ['reward', 'a', 2],
    ['consume', 'a', 2],
    ['consume', 'a'], // past points: blocked for 20 s
    ['get', 'a'],
    ['consume', 'a'],
    ['block', 'b', 5],
    ['get', 'b'],
    ['consume', 'b'],
    ['penalty', 'c', 3],
    ['get', 'c'],
    ['delete', 'a'],
    ['get', 'a'],
    ['consume', 'a', 4],
    ['consume', 'a'],
  ];
  for (const [op, key, arg] of steps) {
    const args = arg === undefined ? [key] : [key, arg];
    const run = async (limiter) => {
      if (op === 'delete') return ['resolved', await limiter.delete(key)];
      return outcome(limiter[op](...args));
    };
    const [a, b] = await Promise.all([run(ours), run(theirs)]);
    const what = `${op}(${args.join(', ')})`;
    assert.equal(a[0], b[0], what);
    if (a[1] === null || typeof a[1] !== 'object') {
      assert.deepEqual(a[1], b[1], what);
      continue;
    }
    // msBeforeNext: the same window's end, read a few milliseconds apart (RateLimiterRedis
    // reads a PTTL, here the window's stored end).
    assert.deepEqual({ ...a[1], msBeforeNext: 0 }, { ...b[1], msBeforeNext: 0 }, what);
    assert.ok(Math.abs(a[1].msBeforeNext - b[1].msBeforeNext) <= 50, `${what}: ${a[1].msBeforeNext} vs ${b[1].msBeforeNext}`);
  }
});

test('a duration the module cannot hold is refused at construction', () => {
  assert.throws(() => new RateLimiterModule({ storeClient: io, points: 1, duration: 0 }), /"never expires"/);
  assert.throws(() => new RateLimiterModule({ storeClient: io, points: 1, duration: 32 * 86400 }), RangeError);
});

test('rejectIfRedisNotReady, and RateLimiterRedis\'s own script refused', async () => {
  for (const storeClient of [{ status: 'closed' }, { isReady: false }, { isOpen: false, _slots: { getClient: () => undefined } }]) {
    const rl = new RateLimiterModule({ storeClient, points: 1, duration: 1, rejectIfRedisNotReady: true });
    await assert.rejects(rl.consume('k'), /Redis connection is not ready/);
    await assert.rejects(rl.get('k'), /Redis connection is not ready/);
  }
  assert.throws(
    () => new RateLimiterModule({ storeClient: io, points: 1, duration: 1, customIncrTtlLuaScript: 'return 1' }),
    /customIncrTtlLuaScript/,
  );
});
