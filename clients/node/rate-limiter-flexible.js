'use strict';
// RateLimiterModule, a limiter of rate-limiter-flexible 11.x on the module (lib/flexible.js).
// Needs rate-limiter-flexible installed beside it (a peer dependency).
module.exports = require('./lib/flexible');
