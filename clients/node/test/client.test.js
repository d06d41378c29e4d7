'use strict';
// Every command through RateLimitClient, on ioredis and on node-redis, against a server with
// the module that this file starts.
const test = require('node:test');
const assert = require('node:assert/strict');
const Redis = require('ioredis');
const { createClient } = require('redis');
const { RateLimitClient, fromIoredis, fromNodeRedis, Limit, Limiter, hit, rateLimit } = require('..');
const { startServer, fresh, calls, waitFor } = require('./helpers');

let server;
test.before(async () => {
  server = await startServer();
});
test.after(() => server.stop());

/**
 * Runs `body(rl, label, io, second)` on an ioredis and on a node-redis client of the server;
 * `io` is an ioredis client for checks, `second` a RateLimitClient on a connection of its own
 * (for a call that blocks its connection).
 */
async function both(body) {
  const io = new Redis(server.port);
  const io2 = new Redis(server.port);
  const nr = await createClient({ url: server.url }).connect();
  const nr2 = await nr.duplicate().connect();
  try {
    await body(new RateLimitClient(io), 'ioredis', io, new RateLimitClient(io2));
    await body(new RateLimitClient(nr), 'node-redis', io, new RateLimitClient(nr2));
  } finally {
    io.disconnect();
    io2.disconnect();
    await nr.quit();
    await nr2.quit();
  }
}

const fields = (d) => [d.allowed, d.limit, d.remaining, d.retryAfterMs, d.resetAfterMs];

test('the rate kinds: RL.SLIDE (one and several windows), RL.TOKEN, RL.LEAKY, RL.FIXED, RL.SUBWIN', async () => {
  await both(async (rl, label) => {
    const s = fresh(`slide:${label}`);
    const got = [];
    for (let i = 0; i < 4; i++) got.push(await rl.slide(s, 3, 1000));
    assert.deepEqual(got.map((d) => d.remaining), [2, 1, 0, 0]);
    assert.equal(got[3].allowed, false);
    assert.ok(got[3].retryAfterMs > 0 && got[3].retryAfterMs <= 1000);

    const two = await rl.slide(fresh(`slide2:${label}`), [[2, 1000], [5, 60000]], { cost: 2 });
    assert.deepEqual(fields(two), [true, 2, 0, 0, 60000]);
    const big = await rl.slide(fresh(`big:${label}`), 10, 1000, { cost: 11 });
    assert.deepEqual(fields(big), [false, 10, 10, -1, 0]);
    assert.ok(big.never);

    const t = await rl.token(fresh(`token:${label}`), 10, 60000, { burst: 4, cost: 3 });
    assert.deepEqual(fields(t).slice(0, 4), [true, 4, 1, 0]);

    const lk = fresh(`leaky:${label}`);
    const a = await rl.leaky(lk, 4, 1000);
    const b = await rl.leaky(lk, 4, 1000, { maxDelay: 500 });
    assert.equal(a.delayMs, 0);
    assert.ok(b.allowed && b.delayMs > 0 && b.delayMs <= 250);

    const f = fresh(`fixed:${label}`);
    assert.deepEqual(fields(await rl.fixed(f, 2, 60000)), [true, 2, 1, 0, 60000]);
    await rl.fixed(f, 2, 60000);
    const refused = await rl.fixed(f, 2, 60000);
    assert.equal(refused.allowed, false);
    assert.equal(refused.retryAfterMs, refused.resetAfterMs, 'a fixed window: Retry-After is its end');
    const aligned = await rl.fixed(fresh(`align:${label}`), 2, 1000, { align: true });
    assert.ok(aligned.resetAfterMs <= 1000);

    const sw = await rl.subwin(fresh(`subwin:${label}`), 4, 1000, 250, { cost: 2 });
    assert.deepEqual(fields(sw).slice(0, 4), [true, 4, 2, 0]);
  });
});

test('NOW decides at the time given', async () => {
  await both(async (rl, label, io) => {
    const [s] = await io.time();
    const t0 = Number(s) * 1000;
    const k = fresh(`now:${label}`);
    assert.deepEqual(fields(await rl.slide(k, 1, 1000, { now: t0 })), [true, 1, 0, 0, 1000]);
    assert.deepEqual(fields(await rl.slide(k, 1, 1000, { now: t0 + 300 })), [false, 1, 0, 700, 700]);
  });
});

test('CL.THROTTLE answers in redis-cell\'s form', async () => {
  await both(async (rl, label) => {
    const k = fresh(`throttle:${label}`);
    const first = await rl.throttle(k, 15, 30, 60);
    assert.deepEqual([first.limited, first.limit, first.remaining, first.retryAfterS, first.resetAfterS], [false, 16, 15, -1, 2]);
    const many = await rl.throttle(k, 15, 30, 60, { quantity: 15 });
    assert.equal(many.remaining, 0);
    const refused = await rl.throttle(k, 15, 30, 60);
    assert.deepEqual([refused.limited, refused.retryAfterS], [true, 2]);
    assert.equal((await rl.throttle(k, 15, 30, 60, { quantity: 17 })).never, true);
  });
});

test('leases: acquire (with an id, with BLOCK), release, extend', async () => {
  await both(async (rl, label, io, second) => {
    const k = fresh(`lease:${label}`);
    const a = await rl.acquire(k, 2, 5000);
    assert.equal(a.allowed, true);
    assert.equal(typeof a.leaseId, 'string');
    const b = await rl.acquire(k, 2, 5000, { id: 'job-9' });
    assert.equal(b.leaseId, 'job-9');
    const full = await rl.acquire(k, 2, 5000);
    assert.deepEqual([full.allowed, full.leaseId], [false, null]);
    assert.equal((await rl.acquire(k, 2, 5000, { id: 'job-9' })).allowed, true, 'a retry renews');
    const ext = await rl.extend(k, 'job-9', 10000);
    assert.deepEqual([ext.allowed, ext.resetAfterMs], [true, 10000]);
    // BLOCK: a waiter (on a connection of its own: it blocks it) is served when a lease is
    // released.
    const t0 = Date.now();
    const blocked = async () => Number(/blocked_clients:(\d+)/.exec(await io.info('clients'))[1]);
    const already = await blocked();
    const waiting = second.acquire(k, 2, 5000, { block: 5000 });
    await waitFor('the waiter to block', async () => (await blocked()) > already);
    assert.equal((await rl.release(k, a.leaseId)).allowed, true);
    const served = await waiting;
    assert.equal(served.allowed, true);
    assert.ok(served.leaseId);
    assert.ok(Date.now() - t0 < 4000, 'served at the release, not at the timeout');
    assert.equal((await rl.release(k, 'never-held')).allowed, false);
    // BLOCK with a timeout: refused as of then.
    const timedOut = await rl.acquire(k, 2, 5000, { block: 50 });
    assert.equal(timedOut.allowed, false);
  });
});

test('peek, refund and charge; nil for a missing key', async () => {
  await both(async (rl, label) => {
    const k = fresh(`token:${label}`);
    assert.equal(await rl.peek(k), null);
    assert.equal(await rl.refund(k), null);
    assert.equal(await rl.charge(k, 3), null);
    await rl.token(k, 10, 60000, { cost: 4 });
    assert.equal((await rl.peek(k)).remaining, 6);
    assert.equal((await rl.peek(k, { cost: 7 })).allowed, false);
    assert.equal((await rl.charge(k, 10)).remaining, 0);
    assert.equal((await rl.refund(k, { cost: 7 })).remaining, 3);
    assert.equal((await rl.refund(k)).remaining, 4);
  });
});

test('RL.ALL: parts in key order, an ACQUIRE entry with its lease', async () => {
  await both(async (rl, label) => {
    const tag = fresh(`{all:${label}}`);
    const d = await rl.all([
      { key: `${tag}:rpm`, kind: 'SLIDE', params: [2, 60000] },
      { key: `${tag}:tpm`, kind: 'token', params: [10, 60000], cost: 3 },
      { key: `${tag}:jobs`, kind: 'ACQUIRE', params: [1, 30000] },
    ]);
    assert.deepEqual([d.allowed, d.limit, d.remaining], [true, 1, 0]);
    assert.deepEqual(d.parts.map((p) => p.remaining), [1, 7, 0]);
    assert.ok(d.parts[2].leaseId);
    const refused = await rl.all([
      { key: `${tag}:rpm`, kind: 'SLIDE', params: [2, 60000] },
      { key: `${tag}:jobs`, kind: 'ACQUIRE', params: [1, 30000] },
    ]);
    assert.equal(refused.allowed, false);
    assert.equal(refused.parts[1].allowed, false);
    assert.equal(refused.parts[0].remaining, 1, 'nothing taken from the rate');
  });
});

test('policies: SET, GET, LIST pages (an async iterator), HIT, TOP, DEL', async () => {
  await both(async (rl, label) => {
    const names = [];
    for (let i = 0; i < 5; i++) {
      const name = fresh(`pol-${label}`).replace(':', '-');
      names.push(name);
      await rl.policySet(name, [
        { name: 'rpm', kind: 'SLIDE', params: [2, 60000, 'COST', 1] },
        { name: 'tpm', kind: 'TOKEN', params: [1000, 60000] },
      ]);
    }
    assert.deepEqual(await rl.policyGet(names[0]), ['rpm', 'SLIDE', '2', '60000', 'COST', '1', 'tpm', 'TOKEN', '1000', '60000']);
    assert.equal(await rl.policyGet('no-such-policy'), null);
    // A flat list of words works too.
    const flat = fresh(`flat-${label}`).replace(':', '-');
    await rl.policySet(flat, ['day', 'FIXED', 10, 86400000, 'ALIGN']);
    assert.deepEqual(await rl.policyGet(flat), ['day', 'FIXED', '10', '86400000', 'ALIGN']);

    const listed = [];
    for await (const p of rl.policies({ count: 2 })) listed.push(p);
    for (const n of [...names, flat]) assert.equal(listed.filter((p) => p.name === n).length, 1, `${n} once`);
    const mine = listed.find((p) => p.name === names[0]);
    assert.match(mine.digest, /^[0-9a-f]{16}$/);
    assert.deepEqual(mine.words, await rl.policyGet(names[0]));
    const page = await rl.policyPage('0', { count: 1 });
    assert.equal(page.policies.length, 1);
    assert.notEqual(page.cursor, '0');

    const subject = fresh('user');
    const d = await rl.hit(names[0], subject, { cost: 10 });
    assert.equal(d.allowed, true);
    assert.equal(d.refusedBy, null);
    assert.deepEqual(d.parts.map((p) => p.remaining), [1, 990]);
    await rl.hit(names[0], subject);
    const refused = await rl.hit(names[0], subject);
    assert.equal(refused.allowed, false);
    assert.equal(refused.refusedBy, 'rpm');
    const top = await rl.top({ policy: names[0], count: 5 });
    assert.deepEqual(top, [{ name: subject, count: 1, error: 0 }]);

    assert.equal(await rl.policyDel(names[0]), true);
    assert.equal(await rl.policyDel(names[0]), false);
    for (const n of [...names.slice(1), flat]) await rl.policyDel(n);
  });
});

test('RL.HIT tells a shadow refusal and a ban; the middleware gives the decision', async () => {
  await both(async (rl, label) => {
    const shadow = fresh(`shadow-${label}`).replace(':', '-');
    await rl.policySet(shadow, ['m', 'SLIDE', 5, 60000, 'b', 'TOKEN', 1, 60000, 'SHADOW']);
    const subject = fresh('user');
    const first = await rl.hit(shadow, subject);
    const second = await rl.hit(shadow, subject);
    assert.equal(first.shadowed, true);
    assert.equal(first.wouldRefuse, null);
    assert.equal(second.allowed, true);
    assert.equal(String(second.wouldRefuse), 'b');
    assert.equal(second.parts[1].allowed, false);
    const box = fresh(`box-${label}`).replace(':', '-');
    await rl.policySet(box, ['PENALTY', 1, 60000, 60000, 'm', 'SLIDE', 1, 60000]);
    assert.equal((await rl.hit(box, subject)).allowed, true);
    const banned = await rl.hit(box, subject);
    assert.equal(banned.banned, true);
    assert.equal(String(banned.refusedBy), 'PENALTY');
    assert.equal(banned.retryAfterMs, 60000);
    // The middleware: the decision on the request, and the shadow refusal told.
    const told = [];
    const limiter = { hit: (k, c) => rl.hit(shadow, k, { cost: c }), limit: new Limit('RL.TOKEN', [1, 60000]) };
    const mw = rateLimit((req, res) => res.end('ok'), { limiter, key: () => subject, onShadow: (name, k) => told.push([name, k]) });
    const req = {};
    const res = { setHeader() {}, writeHead() {}, end() {} };
    await mw(req, res);
    assert.equal(String(req.rateLimit.wouldRefuse), 'b');
    assert.deepEqual(told, [['b', subject]]);
    await rl.policyDel(shadow);
    await rl.policyDel(box);
  });
});

test('the module is checked once per client, with COMMAND INFO', async () => {
  const io = new Redis(server.port);
  const nr = await createClient({ url: server.url }).connect();
  try {
    const before = await calls(io, 'command|info');
    const rl = new RateLimitClient(nr);
    await Promise.all([rl.slide(fresh('once'), 5, 1000), rl.token(fresh('once'), 5, 1000)]);
    for (let i = 0; i < 5; i++) await rl.slide(fresh('once'), 5, 1000);
    // Another wrapper of the same client reuses the answer.
    await new RateLimitClient(fromNodeRedis(nr)).fixed(fresh('once'), 5, 1000);
    assert.equal((await calls(io, 'command|info')) - before, 1);
  } finally {
    io.disconnect();
    await nr.quit();
  }
});

test('keyPrefix: ioredis\'s and node-redis\'s prefix is added to RL.* keys', async () => {
  const plain = new Redis(server.port);
  const io = new Redis(server.port, { keyPrefix: 'tenant-a:' });
  const nr = await createClient({ url: server.url, keyPrefix: 'tenant-b:' }).connect();
  try {
    const key = fresh('prefix');
    await new RateLimitClient(io).token(key, 5, 1000);
    await new Limiter(fromNodeRedis(nr), new Limit('RL.TOKEN', [5, 1000])).hit(key);
    assert.equal(await plain.type(`tenant-a:${key}`), 'ratelimit');
    assert.equal(await plain.type(`tenant-b:${key}`), 'ratelimit');
    assert.equal(await plain.exists(key), 0);
    // RL.ALL: every key prefixed.
    const tag = fresh('{all}');
    await new RateLimitClient(io).all([
      { key: `${tag}:a`, kind: 'SLIDE', params: [5, 1000] },
      { key: `${tag}:b`, kind: 'FIXED', params: [5, 1000] },
    ]);
    assert.equal(await plain.exists(`tenant-a:${tag}:a`, `tenant-a:${tag}:b`), 2);
    // RL.HIT's key is the subject: prefixed too.
    const pol = fresh('pfx-pol').replace(':', '-');
    await new RateLimitClient(plain).policySet(pol, [{ name: 'm', kind: 'SLIDE', params: [5, 60000] }]);
    await hit(io, pol, 'u1');
    assert.equal(await plain.type(`${pol}|m|slide|{tenant-a:u1}`), 'ratelimit');
  } finally {
    plain.disconnect();
    io.disconnect();
    await nr.quit();
  }
});

test('a server error reaches the caller as the client raises it', async () => {
  await both(async (rl) => {
    await assert.rejects(rl.slide(fresh('bad'), 0, 1000), /limit must be an integer/);
    await assert.rejects(rl.policySet('x', ['m', 'SLIDE', '2']), /ERR/);
  });
});

test('ioredis: a pipeline of the driver\'s commands (one slot, one round trip)', async () => {
  const io = new Redis(server.port);
  try {
    const send = fromIoredis(io);
    const key = fresh('pipe');
    const p = io.pipeline();
    for (let i = 0; i < 5; i++) p.sendCommand(send.command(['RL.SLIDE', key, '3', '60000']));
    const replies = (await p.exec()).map(([err, reply]) => {
      assert.ifError(err);
      return reply;
    });
    assert.deepEqual(replies.map((r) => r[0]), [1, 1, 1, 0, 0]);
  } finally {
    io.disconnect();
  }
});
