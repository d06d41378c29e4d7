'use strict';
// RateLimitStore, a Store of express-rate-limit 8.x on the module (lib/express.js).
module.exports = require('./lib/express');
