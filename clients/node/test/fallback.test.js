'use strict';
// A server WITHOUT the module: one clear error without the option; with `fallback: 'lua'`,
// RL.FIXED, RL.SLIDE and RL.TOKEN as their Lua twins (EVALSHA, reloaded on NOSCRIPT), and
// a clear error for the rest. Also the adapters on the fallback.
const test = require('node:test');
const assert = require('node:assert/strict');
const Redis = require('ioredis');
const { createClient } = require('redis');
const { RateLimitClient, ModuleNotLoadedError, MODULE_NOT_LOADED, RateLimitStore, Limiter, Limit } = require('..');
const { RateLimiterModule } = require('../rate-limiter-flexible');
const { startServer, fresh, calls } = require('./helpers');

let plain;
test.before(async () => {
  plain = await startServer({ module: false });
});
test.after(() => plain.stop());

async function both(body) {
  const io = new Redis(plain.port);
  const nr = await createClient({ url: plain.url }).connect();
  try {
    await body(io, 'ioredis', io);
    await body(nr, 'node-redis', io);
  } finally {
    io.disconnect();
    await nr.quit();
  }
}

test('without the option: ModuleNotLoadedError with the shared text, at the first command', async () => {
  await both(async (client) => {
    const rl = new RateLimitClient(client);
    const err = await rl.slide('k', 5, 1000).catch((e) => e);
    assert.ok(err instanceof ModuleNotLoadedError);
    assert.ok(err instanceof Error);
    assert.equal(err.message, MODULE_NOT_LOADED);
    // Every command, the adapters too: never a silent fallback.
    await assert.rejects(rl.peek('k'), ModuleNotLoadedError);
    await assert.rejects(rl.policyGet('p'), ModuleNotLoadedError);
    await assert.rejects(new Limiter(client, new Limit('RL.FIXED', [3, 1000])).hit('k'), ModuleNotLoadedError);
    await assert.rejects(new RateLimitStore({ client }).increment('k'), ModuleNotLoadedError);
    await assert.rejects(new RateLimiterModule({ storeClient: client, points: 5, duration: 1 }).consume('k'), ModuleNotLoadedError);
  });
});

test('fallback: \'lua\': RL.FIXED, RL.SLIDE and RL.TOKEN as EVALSHA of their twins', async () => {
  await both(async (client, label, io) => {
    const rl = new RateLimitClient(client, { fallback: 'lua' });
    assert.equal(await rl.mode(), 'lua');
    const before = await calls(io, 'evalsha');

    const f = fresh(`fixed:${label}`);
    const fixed = [];
    for (let i = 0; i < 4; i++) fixed.push(await rl.fixed(f, 3, 1000));
    assert.deepEqual(fixed.map((d) => [d.allowed, d.limit, d.remaining]), [[true, 3, 2], [true, 3, 1], [true, 3, 0], [false, 3, 0]]);
    assert.ok(fixed[3].retryAfterMs > 0 && fixed[3].retryAfterMs <= 1000);
    assert.equal(fixed[3].retryAfterMs, fixed[3].resetAfterMs);

    const s = fresh(`slide:${label}`);
    const slide = [];
    for (let i = 0; i < 3; i++) slide.push(await rl.slide(s, 2, 1000));
    assert.deepEqual(slide.map((d) => d.allowed), [true, true, false]);
    assert.ok(slide[2].retryAfterMs > 0 && slide[2].retryAfterMs <= 1000);
    assert.equal((await rl.slide(fresh('big'), 10, 1000, { cost: 11 })).never, true);

    const t = fresh(`token:${label}`);
    assert.deepEqual((await rl.token(t, 10, 1000, { cost: 10 })).remaining, 0);
    const refused = await rl.token(t, 10, 1000);
    assert.equal(refused.allowed, false);
    assert.ok(refused.retryAfterMs > 0 && refused.retryAfterMs <= 100, `one token every 100 ms: ${refused.retryAfterMs}`);

    // One EVALSHA per call (the first one of each script may have been an EVAL, after NOSCRIPT).
    assert.ok((await calls(io, 'evalsha')) - before >= 8);
    assert.ok(['string', 'hash', 'zset', 'list'].includes(await io.type(f)), 'the twins keep plain Redis types');
  });
});

test('fallback: a script flushed from the server is reloaded (NOSCRIPT, then EVAL)', async () => {
  await both(async (client, label, io) => {
    const rl = new RateLimitClient(client, { fallback: 'lua' });
    const k = fresh(`reload:${label}`);
    await rl.fixed(k, 5, 60000);
    await io.script('FLUSH');
    const evals = await calls(io, 'eval');
    const d = await rl.fixed(k, 5, 60000);
    assert.equal(d.remaining, 3);
    assert.equal((await calls(io, 'eval')) - evals, 1);
    assert.equal((await rl.fixed(k, 5, 60000)).remaining, 2);
  });
});

test('fallback: the commands without a twin raise ModuleNotLoadedError naming them', async () => {
  await both(async (client) => {
    const rl = new RateLimitClient(client, { fallback: 'lua' });
    for (const [name, call] of [
      ['RL.PEEK', () => rl.peek('k')],
      ['RL.REFUND', () => rl.refund('k')],
      ['RL.LEAKY', () => rl.leaky('k', 1, 1000)],
      ['RL.ACQUIRE', () => rl.acquire('k', 1, 1000)],
      ['RL.HIT', () => rl.hit('p', 's')],
      ['RL.ALL', () => rl.all([{ key: 'k', kind: 'SLIDE', params: [1, 1000] }])],
      ['RL.POLICY', () => rl.policySet('p', ['m', 'SLIDE', 1, 1000])],
      ['RL.TOP', () => rl.top()],
      ['CL.THROTTLE', () => rl.throttle('k', 1, 1, 1)],
    ]) {
      const err = await call().catch((e) => e);
      assert.ok(err instanceof ModuleNotLoadedError, name);
      assert.match(err.message, new RegExp(`^${name.replace('.', '\\.')} needs the ratelimit module`), name);
      assert.match(err.message, /only RL\.FIXED, RL\.SLIDE and RL\.TOKEN are available/);
    }
  });
});

test('fallback: the adapters count through the fixed-window twin', async () => {
  await both(async (client, label) => {
    const store = new RateLimitStore({ client, prefix: `erl-${label}:`, fallback: 'lua' });
    store.init({ windowMs: 60000 });
    const k = fresh('ip');
    const hits = [];
    for (let i = 0; i < 3; i++) hits.push((await store.increment(k)).totalHits);
    assert.deepEqual(hits, [1, 2, 3]);
    await assert.rejects(store.decrement(k), ModuleNotLoadedError);
    await store.resetKey(k);
    assert.equal((await store.increment(k)).totalHits, 1);

    const rlf = new RateLimiterModule({ storeClient: client, points: 2, duration: 60, keyPrefix: `rlf-${label}`, fallback: 'lua' });
    const u = fresh('u');
    const r1 = await rlf.consume(u);
    assert.deepEqual(r1.toJSON(), { remainingPoints: 1, msBeforeNext: 60000, consumedPoints: 1, isFirstInDuration: true });
    assert.equal((await rlf.penalty(u, 2)).consumedPoints, 3);
    const rejected = await rlf.consume(u).catch((e) => e);
    assert.equal(rejected.consumedPoints, 4);
    await assert.rejects(rlf.reward(u), ModuleNotLoadedError);
    await assert.rejects(rlf.block(u, 10), ModuleNotLoadedError);
  });
});

test('a fallback other than \'lua\' is refused at once', () => {
  assert.throws(() => new RateLimitClient(() => null, { fallback: 'memory' }), TypeError);
});
