// Type checks of the declarations, for a CommonJS TypeScript user (tsc --noEmit; test/types.test.js).
import Redis from 'ioredis';
import { createClient, createCluster } from 'redis';
import express from 'express';
import { rateLimit, type Store } from 'express-rate-limit';
import { RateLimiterRes, type RateLimiterAbstract } from 'rate-limiter-flexible';
import {
  RateLimitClient, Decision, Throttle, Limit, Limiter, RefusalCache, headers, hit, fromIoredis, fromNodeRedis,
  ModuleNotLoadedError, RateLimitStore, type Policy, type TopEntry,
} from 'redis-ratelimit-client';
import { RateLimitStore as Store2 } from 'redis-ratelimit-client/express-rate-limit';
import { RateLimiterModule } from 'redis-ratelimit-client/rate-limiter-flexible';

async function main(): Promise<void> {
  const io = new Redis();
  const nr = createClient();
  const cluster = createCluster({ rootNodes: [] });
  const rl = new RateLimitClient(io, { fallback: 'lua' });
  const d: Decision = await rl.slide('k', 100, 60000, { cost: 2 });
  const several: Decision = await rl.slide('k', [[10, 1000], [100, 60000]]);
  const allowed: boolean = d.allowed && several.never;
  const retry: number | null = d.retryAfterS;
  const t: Throttle = await new RateLimitClient(nr).throttle('k', 15, 30, 60, { quantity: 2 });
  const peeked: Decision | null = await new RateLimitClient(cluster).peek('k', { replica: true });
  const lease = await rl.acquire('k', 2, 1000, { block: 100 });
  if (lease.leaseId !== null) await rl.release('k', lease.leaseId);
  const all = await rl.all([{ key: '{u}a', kind: 'SLIDE', params: [1, 1000] }]);
  const parts: readonly Decision[] = all.parts;
  await rl.policySet('p', [{ name: 'm', kind: 'SLIDE', params: [1, 1000] }]);
  for await (const p of rl.policies({ count: 10 })) {
    const policy: Policy = p;
    void policy.digest;
  }
  const top: TopEntry[] = await rl.top({ policy: 'p' });
  const h: Array<[string, string]> = headers(d, new Limit('RL.SLIDE', [100, 60000], 'ip'));
  const limiter = new Limiter(fromIoredis(io), new Limit('RL.TOKEN', [10, 1000]), new RefusalCache());
  const hd: Decision = await limiter.hit('k');
  const viaHit: Decision = await hit(fromNodeRedis(nr), 'p', 'user:1');
  const err: Error = new ModuleNotLoadedError();

  const store: Store = new RateLimitStore({ client: io, prefix: 'rl:' });
  const store2: Store = new Store2({ client: nr });
  express().use(rateLimit({ store, windowMs: 60000, limit: 10 }));

  const rlf = new RateLimiterModule({ storeClient: io, points: 5, duration: 60, blockDuration: 10 });
  const asAbstract: RateLimiterAbstract = rlf;
  const res: RateLimiterRes = await rlf.consume('user', 2);
  const blocked: RateLimiterRes = await rlf.block('user', 10);
  void [allowed, retry, t, peeked, parts, top, h, hd, viaHit, err, store2, asAbstract, res, blocked];
}
void main;
