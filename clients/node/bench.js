#!/usr/bin/env node
'use strict';
// Per-request cost of the adapters beside the stock stores, side by side in one run, on one
// redis-server with the module that this script starts (MODULE, as the tests):
//
//   express-rate-limit   RateLimitStore (RL.FIXED)  vs  rate-limit-redis (EVALSHA of its Lua)
//                        store.increment() calls, and HTTP requests to an Express app
//   rate-limiter-flexible RateLimiterModule (RL.FIXED) vs RateLimiterRedis (EVALSHA of its Lua)
//                        limiter.consume() calls
//
// For each: decisions (or requests) per second with CONCURRENCY calls in flight over one
// ioredis connection, and, from INFO commandstats deltas, what a decision costs the server:
// its time in microseconds (the sent commands' usec, a script's including what it runs), the
// commands the client sends (its round trips: RL.*, EVALSHA, EVAL, ...) and those a script
// runs inside the server (INCR, PTTL, SET, ...). Each variant runs ROUNDS times, alternating;
// medians are reported. The client, the server and the HTTP app share the machine's cores: the
// rates are the whole system's, the server's microseconds are the server's alone.
//
//   node bench.js [--seconds 2] [--rounds 3] [--concurrency 50] [--keys 1000]

const http = require('node:http');
const Redis = require('ioredis');
const express = require('express');
const { rateLimit } = require('express-rate-limit');
const { RedisStore } = require('rate-limit-redis');
const { RateLimiterRedis } = require('rate-limiter-flexible');
const { RateLimitStore } = require('./express-rate-limit');
const { RateLimiterModule } = require('./rate-limiter-flexible');
const { startServer } = require('./test/helpers');

const arg = (name, dflt) => {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? Number(process.argv[i + 1]) : dflt;
};
const SECONDS = arg('seconds', 2);
const ROUNDS = arg('rounds', 3);
const CONCURRENCY = arg('concurrency', 50);
const KEYS = arg('keys', 1000);
const HUGE = 1e9; // limits no call reaches: every decision allows, as most do in production

/** Commands a client sends; the others in commandstats ran inside a script. */
const SENT = /^(rl\.|cl\.|evalsha|eval|script|exec|multi|del$)/i;
/** The benchmark's own commands, left out of the counts. */
const OWN = /^(config|info|ping|command|client|hello|select)/i;

/** { command: calls } and the server's microseconds in the commands clients sent. */
function commandstats(text) {
  const out = {};
  let usec = 0;
  for (const m of text.matchAll(/^cmdstat_([^:]+):calls=(\d+),usec=(\d+)/gm)) {
    if (OWN.test(m[1])) continue;
    out[m[1].toLowerCase()] = Number(m[2]);
    // A script's time includes the commands it runs: count the sent commands' only.
    if (SENT.test(m[1])) usec += Number(m[3]);
  }
  return { out, usec };
}

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

/** Runs `decide(i)` with CONCURRENCY in flight for SECONDS: { count, commands }. */
async function run(admin, decide) {
  let i = 0;
  const loop = async (until) => {
    while (Date.now() < until) await decide(i++ % KEYS);
  };
  // Warm up (scripts loaded, connections made), then count.
  await Promise.all(Array.from({ length: CONCURRENCY }, () => loop(Date.now() + 300)));
  await admin.config('RESETSTAT');
  i = 0;
  let count = 0;
  const until = Date.now() + SECONDS * 1000;
  await Promise.all(
    Array.from({ length: CONCURRENCY }, async () => {
      while (Date.now() < until) {
        await decide(i++ % KEYS);
        count++;
      }
    }),
  );
  const { out: commands, usec } = commandstats(await admin.info('commandstats'));
  return { count, commands, usec };
}

/** An Express app limited by `store`, and a function making one request to it. */
async function httpTarget(store) {
  const app = express();
  app.use(rateLimit({ store, windowMs: 60000, limit: HUGE, keyGenerator: (req) => req.headers['x-client'], validate: false }));
  app.get('/', (_req, res) => res.send('hello'));
  const server = await new Promise((resolve) => {
    const s = app.listen(0, '127.0.0.1', () => resolve(s));
  });
  const agent = new http.Agent({ keepAlive: true, maxSockets: CONCURRENCY });
  const { port } = server.address();
  const request = (i) =>
    new Promise((resolve, reject) => {
      http
        .get({ host: '127.0.0.1', port, path: '/', agent, headers: { 'x-client': `c${i}` } }, (res) => {
          res.resume();
          res.on('end', () => (res.statusCode === 200 ? resolve() : reject(new Error(`status ${res.statusCode}`))));
        })
        .on('error', reject);
    });
  const close = () =>
    new Promise((resolve) => {
      agent.destroy();
      server.close(resolve);
    });
  return { request, close };
}

async function main() {
  const server = await startServer();
  const admin = new Redis(server.port);
  const io = new Redis(server.port);
  const plainSend = (...args) => io.call(...args);
  try {
    const variants = [
      {
        group: 'express-rate-limit, store.increment()',
        name: 'RateLimitStore',
        make: () => {
          const s = new RateLimitStore({ client: io, prefix: 'b-erl-module:' });
          s.init({ windowMs: 60000 });
          return (i) => s.increment(`k${i}`);
        },
      },
      {
        group: 'express-rate-limit, store.increment()',
        name: 'rate-limit-redis',
        make: () => {
          const s = new RedisStore({ sendCommand: plainSend, prefix: 'b-erl-lua:' });
          s.init({ windowMs: 60000 });
          return (i) => s.increment(`k${i}`);
        },
      },
      {
        group: 'express-rate-limit, HTTP requests',
        name: 'RateLimitStore',
        http: () => new RateLimitStore({ client: io, prefix: 'b-http-module:' }),
      },
      {
        group: 'express-rate-limit, HTTP requests',
        name: 'rate-limit-redis',
        http: () => new RedisStore({ sendCommand: plainSend, prefix: 'b-http-lua:' }),
      },
      {
        group: 'rate-limiter-flexible, consume()',
        name: 'RateLimiterModule',
        make: () => {
          const l = new RateLimiterModule({ storeClient: io, points: HUGE, duration: 60, keyPrefix: 'b-rlf-module' });
          return (i) => l.consume(`k${i}`);
        },
      },
      {
        group: 'rate-limiter-flexible, consume()',
        name: 'RateLimiterRedis',
        make: () => {
          const l = new RateLimiterRedis({ storeClient: io, points: HUGE, duration: 60, keyPrefix: 'b-rlf-lua' });
          return (i) => l.consume(`k${i}`);
        },
      },
    ];
    const results = new Map(variants.map((v) => [v, []]));
    for (let round = 0; round < ROUNDS; round++) {
      for (const v of variants) {
        if (v.http) {
          const target = await httpTarget(v.http());
          results.get(v).push(await run(admin, target.request));
          await target.close();
        } else {
          results.get(v).push(await run(admin, v.make()));
        }
      }
    }
    console.log(
      `redis-server ${(await admin.info('server')).match(/redis_version:(\S+)/)[1]}, ioredis, ` +
        `${CONCURRENCY} in flight, ${KEYS} keys, ${ROUNDS} rounds of ${SECONDS} s (median)\n`,
    );
    let group = null;
    for (const v of variants) {
      if (v.group !== group) {
        group = v.group;
        console.log(group);
      }
      const runs = results.get(v);
      const rate = median(runs.map((r) => r.count / SECONDS));
      const serverUs = median(runs.map((r) => r.usec / r.count));
      const last = runs[runs.length - 1];
      const sent = Object.entries(last.commands).filter(([c]) => SENT.test(c));
      const inside = Object.entries(last.commands).filter(([c]) => !SENT.test(c));
      const per = (list) => list.reduce((a, [, n]) => a + n, 0) / last.count;
      const show = (list) => list.map(([c, n]) => `${c} ${(n / last.count).toFixed(2)}`).join(', ') || '-';
      console.log(
        `  ${v.name.padEnd(18)} ${Math.round(rate).toString().padStart(7)}/s   ` +
          `server ${serverUs.toFixed(2)} us   round trips ${per(sent).toFixed(2)} (${show(sent)})   ` +
          `run in scripts ${per(inside).toFixed(2)} (${show(inside)})`,
      );
    }
  } finally {
    admin.disconnect();
    io.disconnect();
    await server.stop();
  }
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
