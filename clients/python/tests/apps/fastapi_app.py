"""A FastAPI app limited by SlowAPI on a storage URI, served by uvicorn.

    python fastapi_app.py <port> <storage_uri> <strategy> <key_prefix> <limit>
"""

import sys

import uvicorn
from fastapi import FastAPI, Request, Response
from slowapi import Limiter, _rate_limit_exceeded_handler
from slowapi.errors import RateLimitExceeded
from slowapi.util import get_remote_address

import redis_ratelimit_client  # noqa: F401  (registers ratelimit:// with limits)

port, storage_uri, strategy, prefix, limit = sys.argv[1:6]
limiter = Limiter(
    key_func=get_remote_address,
    storage_uri=storage_uri,
    strategy=strategy,
    key_prefix=prefix,
    headers_enabled=True,
)
app = FastAPI()
app.state.limiter = limiter
app.add_exception_handler(RateLimitExceeded, _rate_limit_exceeded_handler)


@app.get("/")
@limiter.limit(limit)
async def index(request: Request, response: Response):
    return {"hello": "world"}


uvicorn.run(app, host="127.0.0.1", port=int(port), log_level="warning")
