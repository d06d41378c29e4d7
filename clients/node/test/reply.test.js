'use strict';
// Without a server: the typed replies, the headers, the package's version and the Lua copies.
const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');
const { Decision, Throttle, Limit, headers, RefusalCache, VERSION, MODULE_NOT_LOADED, ModuleNotLoadedError } = require('..');
const { policyPage, topEntries } = require('../lib/reply');
const { LUA_DIR } = require('../lib/lua');
const { ROOT } = require('./helpers');

const asMap = (pairs) => Object.fromEntries(pairs);

test('the version is the module\'s (the top-level Cargo.toml)', () => {
  const cargo = fs.readFileSync(path.join(ROOT, 'Cargo.toml'), 'utf8');
  const version = /^version = "([^"]+)"/m.exec(cargo)[1];
  assert.equal(VERSION, version);
  assert.equal(require('../package.json').version, version);
});

test('the Lua twins are byte-identical copies of clients/lua', (t) => {
  const canonical = path.join(ROOT, 'clients', 'lua');
  if (!fs.existsSync(path.join(canonical, 'fixed.lua'))) {
    t.skip('no clients/lua beside this package (installed from a tarball): nothing to compare lua/*.lua with');
    return;
  }
  for (const name of ['fixed.lua', 'slide.lua', 'token.lua']) {
    assert.ok(
      fs.readFileSync(path.join(LUA_DIR, name)).equals(fs.readFileSync(path.join(canonical, name))),
      `lua/${name} differs from clients/lua/${name}: npm run sync-lua`,
    );
  }
});

test('the module-missing message is the one every client raises', () => {
  assert.match(MODULE_NOT_LOADED, /^the ratelimit module is not loaded on this server \(RL\.SLIDE is unknown\): /);
  assert.match(MODULE_NOT_LOADED, /pass fallback: 'lua' \(fixed window, sliding log and token bucket only\)\. See docs\/clients\.md of redis-ratelimit\.$/);
  const err = new ModuleNotLoadedError();
  assert.ok(err instanceof Error);
  assert.equal(err.message, MODULE_NOT_LOADED);
  assert.equal(err.name, 'ModuleNotLoadedError');
});

test('Decision: the five fields, the derived readings, and strict parsing', () => {
  const d = Decision.fromReply([0, 10, 0, 1200, 5000]);
  assert.deepEqual([d.allowed, d.limit, d.remaining, d.retryAfterMs, d.resetAfterMs], [false, 10, 0, 1200, 5000]);
  assert.equal(d.retryAfterS, 2, 'rounded up');
  assert.equal(d.delayMs, 0);
  assert.equal(d.never, false);
  assert.equal(Decision.fromReply([0, 10, 0, 1, 1]).retryAfterS, 1, 'at least 1');
  const never = Decision.fromReply([0, 10, 10, -1, 0]);
  assert.equal(never.never, true);
  assert.equal(never.retryAfterS, null);
  const leaky = Decision.fromReply([1, 5, 3, 250, 500]);
  assert.equal(leaky.delayMs, 250);
  assert.equal(leaky.retryAfterS, null);
  assert.equal(Decision.fromReply(null), null);
  assert.ok(Object.isFrozen(d));
  // Numbers given as strings (a RESP client that keeps them so) parse too.
  assert.equal(Decision.fromReply(['1', '3', '2', '0', '1000']).remaining, 2);
  for (const bad of [[1, 2, 3], [1, 2, 3, 4, [5]], 'OK', [1, 2, 3, 4, 'x'], [1, 2, 3, 4, 5, [1, 2]], [1, 2, 3, 4, 5, 7]]) {
    assert.throws(() => Decision.fromReply(bad), TypeError, JSON.stringify(bad));
  }
});

test('Decision: RL.ACQUIRE, RL.ALL and RL.HIT replies', () => {
  const acq = Decision.fromReply([1, 2, 1, 0, 1000, '1700000000000-0']);
  assert.equal(acq.leaseId, '1700000000000-0');
  assert.equal(Decision.fromReply([0, 2, 0, 800, 900, null]).leaseId, null);
  const all = Decision.fromReply([1, 2, 0, 0, 60000, [1, 60, 58, 0, 60000], [1, 2, 0, 0, 30000, 'L']]);
  assert.equal(all.parts.length, 2);
  assert.equal(all.parts[1].leaseId, 'L');
  assert.equal(all.refusedBy, null);
  const hitReply = Decision.fromReply([0, 2, 0, 59948, 86399948, 'm', [0, 2, 0, 59948, 59972], [1, 10, 8, 0, 86399948]]);
  assert.equal(hitReply.refusedBy, 'm');
  assert.deepEqual(hitReply.parts.map((p) => p.remaining), [0, 8]);
  const allowedHit = Decision.fromReply([1, 2, 1, 0, 60000, null, [1, 2, 1, 0, 60000]]);
  assert.equal(allowedHit.refusedBy, null);
  assert.equal(allowedHit.parts.length, 1);
});

test('Throttle, RL.POLICY LIST pages and RL.TOP entries', () => {
  const t = Throttle.fromReply([1, 16, 0, 2, 32]);
  assert.deepEqual([t.limited, t.allowed, t.limit, t.remaining, t.retryAfterS, t.resetAfterS], [true, false, 16, 0, 2, 32]);
  assert.equal(Throttle.fromReply([1, 16, 0, -1, 32]).never, true);
  assert.throws(() => Throttle.fromReply([1, 2, 3]), TypeError);
  assert.deepEqual(policyPage(['(p1', [['p1', 'abc', ['m', 'SLIDE', '2', '60000']]]]), {
    cursor: '(p1',
    policies: [{ name: 'p1', digest: 'abc', words: ['m', 'SLIDE', '2', '60000'] }],
  });
  assert.throws(() => policyPage(['0']), TypeError);
  assert.deepEqual(topEntries([['user:7', 1840, 12]]), [{ name: 'user:7', count: 1840, error: 12 }]);
  assert.throws(() => topEntries([['x', 1]]), TypeError);
});

test('headers: one window, several windows, never, and RL.ALL', () => {
  const limit = new Limit('RL.SLIDE', [3, 1000]);
  const refused = asMap(headers(new Decision(false, 3, 0, 400, 900), limit));
  assert.deepEqual(refused, {
    'X-RateLimit-Limit': '3',
    'X-RateLimit-Remaining': '0',
    'X-RateLimit-Reset': '1',
    'RateLimit-Policy': '"default";q=3;w=1',
    RateLimit: '"default";r=0;t=1',
    'Retry-After': '1',
  });
  const two = new Limit('RL.SLIDE', [2, 1000, 5, 60000], 'api');
  const th = asMap(headers(new Decision(true, 2, 1, 0, 60000), two));
  assert.equal(th['RateLimit-Policy'], '"api-1000ms";q=2;w=1, "api-60000ms";q=5;w=60');
  assert.equal(th.RateLimit, '"api-1000ms";r=1;t=60');
  assert.equal(th['Retry-After'], undefined);
  const never = asMap(headers(new Decision(false, 10, 10, -1, 0), new Limit('RL.SLIDE', [10, 1000])));
  assert.equal(never['Retry-After'], undefined);
  assert.equal(never.RateLimit, '"default";r=10');
  // A 500 ms window is advertised as w=1; a token bucket's policy is its rate.
  assert.equal(asMap(headers(new Decision(true, 20, 19, 0, 300), new Limit('RL.TOKEN', [100, 500, 'BURST', 20], 'b')))['RateLimit-Policy'], '"b";q=100;w=1');
  // RL.ALL: every limiter in the policy, one RateLimit item per part.
  const all = new Decision(false, 2, 0, 59998, 59999, [new Decision(false, 2, 0, 59998, 59999), new Decision(true, 10000, 4000, 0, 35998)]);
  const ah = asMap(headers(all, [new Limit('RL.SLIDE', [2, 60000], 'rpm'), new Limit('RL.TOKEN', [10000, 60000], 'tpm')]));
  assert.equal(ah['RateLimit-Policy'], '"rpm";q=2;w=60, "tpm";q=10000;w=60');
  assert.equal(ah.RateLimit, '"rpm";r=0;t=60, "tpm";r=4000;t=36');
  assert.equal(ah['Retry-After'], '60');
  assert.throws(() => headers(all, [limit]), TypeError);
});

test('RefusalCache: refuses locally until the deadline, counted down; smaller costs ask again', () => {
  let now = 0;
  const cache = new RefusalCache(2, () => now);
  cache.remember('a', 1, new Decision(false, 3, 0, 1000, 1500));
  cache.remember('n', 1, new Decision(false, 3, 3, -1, 0)); // never: not remembered
  cache.remember('ok', 1, new Decision(true, 3, 2, 0, 1000)); // allowed: not remembered
  assert.equal(cache.size, 1);
  now = 400;
  const d = cache.check('a', 1);
  assert.deepEqual([d.allowed, d.retryAfterMs, d.resetAfterMs], [false, 600, 1100]);
  assert.equal(cache.check('a', 0), null, 'a smaller request may fit');
  now = 1000;
  assert.equal(cache.check('a', 1), null);
  assert.equal(cache.size, 0);
  for (const k of ['x', 'y', 'z']) cache.remember(k, 1, new Decision(false, 3, 0, 5000, 5000));
  assert.equal(cache.size, 2, 'bounded: the oldest goes');
  assert.equal(cache.check('x', 1), null);
});
