"""A Flask app limited by Flask-Limiter on a storage URI, served by werkzeug.

    python flask_app.py <port> <storage_uri> <strategy> <key_prefix> <limit>
"""

import sys

from flask import Flask
from flask_limiter import Limiter
from flask_limiter.util import get_remote_address
from werkzeug.serving import make_server

import redis_ratelimit_client  # noqa: F401  (registers ratelimit:// with limits)

port, storage_uri, strategy, prefix, limit = sys.argv[1:6]
app = Flask(__name__)
limiter = Limiter(
    get_remote_address,
    app=app,
    storage_uri=storage_uri,
    strategy=strategy,
    key_prefix=prefix,
    headers_enabled=True,
)


@app.route("/")
@limiter.limit(limit)
def index():
    return "hello\n"


make_server("127.0.0.1", int(port), app, threaded=True).serve_forever()
