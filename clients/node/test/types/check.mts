// Type checks of the declarations, for an ES module TypeScript user.
import { Redis } from 'ioredis';
import { RateLimitClient, Decision, RateLimitStore } from 'redis-ratelimit-client';
import { RateLimiterModule } from 'redis-ratelimit-client/rate-limiter-flexible';
import type { Store } from 'express-rate-limit';

const io = new Redis();
const d: Decision = await new RateLimitClient(io).fixed('k', 10, 1000, { align: true });
const store: Store = new RateLimitStore({ client: io });
const rlf = new RateLimiterModule({ storeClient: io, points: 5, duration: 60 });
void [d, store, rlf];
