"""HTTP response headers from one decision, without a second call (docs/clients.md,
"Headers"): the IETF draft's ``RateLimit-Policy`` and ``RateLimit``, ``Retry-After`` on a
refusal, and the legacy ``X-RateLimit-Limit/-Remaining/-Reset``. Seconds are rounded up, so
that a client that waits the advertised time is not refused again for the same reason."""

from __future__ import annotations

from typing import List, Sequence, Tuple

from .decision import Decision, ceil_s
from .specs import Spec

Header = Tuple[str, str]


def _deciding_window(d: Decision, spec: Spec) -> Tuple[int, int]:
    windows = spec.windows()
    # RL.SLIDE with several windows answers the deciding window's limit; when two share it,
    # the longer one, as the module breaks ties. RL.TOKEN and RL.LEAKY answer a bucket size,
    # not the policy's quota: their one window.
    same = [w for w in windows if w[0] == d.limit]
    return max(same, key=lambda w: w[1]) if same else windows[0]


def _policy_items(spec: Spec) -> List[str]:
    return [f'"{spec.window_name(ms)}";q={q};w={ceil_s(ms)}' for q, ms in spec.windows()]


def _current_item(d: Decision, spec: Spec) -> str:
    item = f'"{spec.window_name(_deciding_window(d, spec)[1])}";r={d.remaining}'
    if not d.never:
        item += f";t={ceil_s(d.reset_after_ms)}"
    return item


def _legacy(d: Decision) -> List[Header]:
    return [
        ("X-RateLimit-Limit", str(d.limit)),
        ("X-RateLimit-Remaining", str(d.remaining)),
        ("X-RateLimit-Reset", str(ceil_s(d.reset_after_ms))),
    ]


def _retry_after(d: Decision) -> List[Header]:
    return [] if d.retry_after_s is None else [("Retry-After", str(d.retry_after_s))]


def headers(d: Decision, spec: Spec) -> List[Header]:
    """The headers for one limiter's decision. ``spec`` is the limiter the call used (its
    windows and name make ``RateLimit-Policy``; the reply makes the rest).

    >>> headers(Decision(False, 3, 0, 700, 900), Slide(3, 1000))   # doctest: +SKIP
    [('X-RateLimit-Limit', '3'), ('X-RateLimit-Remaining', '0'), ('X-RateLimit-Reset', '1'),
     ('RateLimit-Policy', '"default";q=3;w=1'), ('RateLimit', '"default";r=0;t=1'),
     ('Retry-After', '1')]
    """
    return [
        *_legacy(d),
        ("RateLimit-Policy", ", ".join(_policy_items(spec))),
        ("RateLimit", _current_item(d, spec)),
        *_retry_after(d),
    ]


def headers_all(d: Decision, specs: Sequence[Spec]) -> List[Header]:
    """The headers for an RL.ALL or RL.HIT decision: the ``X-`` trio and ``Retry-After``
    from the call's five fields, ``RateLimit-Policy`` listing every limiter, and
    ``RateLimit`` one item per limiter from ``d.parts`` (its own ``r`` and ``t``), so that a
    client sees which one refused. ``specs`` are the limiters in key (or policy) order; give
    each a distinct ``name``."""
    if len(specs) != len(d.parts):
        raise ValueError(f"{len(specs)} specs for a decision of {len(d.parts)} parts")
    return [
        *_legacy(d),
        ("RateLimit-Policy", ", ".join(i for s in specs for i in _policy_items(s))),
        ("RateLimit", ", ".join(_current_item(p, s) for p, s in zip(d.parts, specs))),
        *_retry_after(d),
    ]


def headers_plain(d: Decision) -> List[Header]:
    """The headers the five fields alone make, when the limiters are not known (a policy
    held by the server): the ``X-`` trio and ``Retry-After``."""
    return [*_legacy(d), *_retry_after(d)]
