"""Typed replies: the five-field decision every limiter answers, and the replies of
CL.THROTTLE, RL.POLICY LIST and RL.TOP (docs/commands.md)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, List, Optional, Sequence, Tuple, Union

#: ``retry_after_ms`` of a request whose cost is above what the limiter can ever hold.
NEVER = -1

#: What a server string comes back as: ``bytes``, or ``str`` on a client made with
#: ``decode_responses=True``.
Text = Union[bytes, str]


def ceil_s(ms: int) -> int:
    """Milliseconds to whole seconds, rounded up (a wait of 0.7 s is 1 s, never 0)."""
    return -(-ms // 1000)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _is_array(value: Any) -> bool:
    return isinstance(value, (list, tuple))


def _shape_error(reply: Any, what: str = "a five-field rate limiter reply") -> ValueError:
    return ValueError(f"not {what}: {reply!r}")


@dataclass(frozen=True)
class Decision:
    """One reply of RL.SLIDE, RL.TOKEN, RL.LEAKY, RL.FIXED, RL.SUBWIN, RL.ACQUIRE,
    RL.RELEASE, RL.EXTEND, RL.PEEK, RL.REFUND, RL.CHARGE, RL.ALL or RL.HIT
    (docs/commands.md, "The reply"), or of a Lua twin.

    ``parts`` holds RL.ALL's and RL.HIT's entries, one per limiter in key (or policy)
    order, each a Decision; ``lease_id`` is RL.ACQUIRE's lease (also in an ACQUIRE entry of
    RL.ALL or RL.HIT), None when none was granted; ``refused_by`` is RL.HIT's refusing
    limiter, None when allowed (``"PENALTY"`` when the policy's penalty box refused it: see
    ``banned``). Under a policy with shadow limiters, ``shadowed`` is True and
    ``would_refuse`` names the shadow limiter that would have refused (None when none would):
    log it while a new limit is tried. Lease ids come back as the redis client returns
    strings (``bytes``, or ``str`` with ``decode_responses=True``): an ``ID`` may be any
    bytes.
    """

    allowed: bool
    #: the deciding window's limit, or a bucket's size (RL.LEAKY: bookings that fit from idle)
    limit: int
    #: units available now, after this call, in the tightest window
    remaining: int
    #: refused: the exact wait until the same request fits, or NEVER (-1);
    #: allowed: 0, or the delay RL.LEAKY asks for
    retry_after_ms: int
    #: time until the limiter is back to empty if nothing else arrives (the key's PTTL)
    reset_after_ms: int
    parts: Tuple["Decision", ...] = ()
    lease_id: Optional[Text] = None
    refused_by: Optional[str] = None
    would_refuse: Optional[str] = None
    shadowed: bool = False

    @classmethod
    def from_reply(cls, reply: Any) -> Optional["Decision"]:
        """The typed reply, or None for the nil of RL.PEEK, RL.REFUND and RL.CHARGE on a
        missing key. Strict: anything but nil, five integers, five integers and a lease id
        (RL.ACQUIRE), RL.ALL's five and its entries, or RL.HIT's five, the refusing name
        and its entries raises ValueError, so that a reply of another shape never passes
        for a decision."""
        if reply is None:
            return None
        if not _is_array(reply) or len(reply) < 5:
            raise _shape_error(reply)
        head, rest = list(reply[:5]), list(reply[5:])
        if not all(isinstance(x, int) and not isinstance(x, bool) for x in head):
            raise _shape_error(reply)
        allowed, limit, remaining, retry, reset = head
        if allowed not in (0, 1):
            raise _shape_error(reply)
        lease_id: Optional[Text] = None
        refused_by: Optional[str] = None
        would_refuse: Optional[str] = None
        shadowed = False
        parts: Tuple[Decision, ...] = ()
        if len(rest) == 1 and not _is_array(rest[0]):
            # RL.ACQUIRE: the lease id, nil when refused.
            if rest[0] is not None and not isinstance(rest[0], (bytes, str)):
                raise _shape_error(reply)
            lease_id = rest[0]
        elif rest:
            if not _is_array(rest[0]):
                # RL.HIT: the refusing limiter's name (nil when allowed), then the entries.
                if rest[0] is not None and not isinstance(rest[0], (bytes, str)):
                    raise _shape_error(reply)
                refused_by = None if rest[0] is None else _text(rest[0])
                rest = rest[1:]
                # Under shadow limiters: the one that would have refused, last (not an
                # array, which tells it from the entries).
                if len(rest) > 1 and not _is_array(rest[-1]):
                    last = rest.pop()
                    if last is not None and not isinstance(last, (bytes, str)):
                        raise _shape_error(reply, "an RL.HIT reply")
                    would_refuse = None if last is None else _text(last)
                    shadowed = True
                if not rest:
                    raise _shape_error(reply, "an RL.HIT reply")
            entries = []
            for entry in rest:
                if not _is_array(entry) or len(entry) not in (5, 6) or _is_array(entry[-1]):
                    raise _shape_error(reply, "an RL.ALL or RL.HIT reply")
                entries.append(cls.from_reply(entry))
            parts = tuple(e for e in entries if e is not None)
            if len(parts) != len(entries):
                raise _shape_error(reply, "an RL.ALL or RL.HIT reply")
        return cls(
            allowed == 1,
            limit,
            remaining,
            retry,
            reset,
            parts,
            lease_id,
            refused_by,
            would_refuse,
            shadowed,
        )

    @property
    def banned(self) -> bool:
        """Refused by a policy's penalty box (RL.HIT): the subject is banned for
        ``retry_after_ms`` more."""
        return not self.allowed and self.refused_by == "PENALTY"

    @property
    def never(self) -> bool:
        """Refused for good: the cost is above what the limiter can ever hold, so waiting
        does not help; do not retry."""
        return not self.allowed and self.retry_after_ms == NEVER

    @property
    def delay_ms(self) -> int:
        """How long an allowed call must wait before acting: RL.LEAKY's booking (0 for every
        other kind, and when refused)."""
        return self.retry_after_ms if self.allowed else 0

    @property
    def retry_after_s(self) -> Optional[int]:
        """``Retry-After`` in whole seconds, rounded up and at least 1; None when allowed or
        never (a client told "0" retries at once and is refused again)."""
        if self.allowed or self.never:
            return None
        return max(1, ceil_s(self.retry_after_ms))


def decision(reply: Any) -> Decision:
    """A reply that cannot be nil (every limiter command, RL.ALL, RL.HIT)."""
    d = Decision.from_reply(reply)
    if d is None:
        raise _shape_error(reply)
    return d


@dataclass(frozen=True)
class Throttle:
    """CL.THROTTLE's reply, in redis-cell's own form and whole seconds
    (docs/commands.md, "CL.THROTTLE")."""

    #: True when refused (the opposite of ``Decision.allowed``), as redis-cell answers it
    limited: bool
    #: max_burst + 1, what the bucket holds
    limit: int
    remaining: int
    #: refused: seconds to wait, rounded up; -1 when allowed, and when it can never fit
    retry_after_s: int
    #: seconds until the bucket is full again
    reset_after_s: int

    @property
    def allowed(self) -> bool:
        return not self.limited

    @property
    def never(self) -> bool:
        """Refused because the quantity is above what the bucket holds."""
        return self.limited and self.retry_after_s == -1

    @classmethod
    def from_reply(cls, reply: Any) -> "Throttle":
        if (
            not _is_array(reply)
            or len(reply) != 5
            or not all(isinstance(x, int) and not isinstance(x, bool) for x in reply)
        ):
            raise _shape_error(reply, "a CL.THROTTLE reply")
        limited, limit, remaining, retry, reset = reply
        return cls(limited == 1, limit, remaining, retry, reset)


@dataclass(frozen=True)
class Policy:
    """One policy of RL.POLICY LIST: its name, the digest of its definition (64-bit FNV-1a
    of the words as written, in hex: the same on every node for the same definition) and
    the definition's words."""

    name: str
    digest: str
    words: Tuple[str, ...]


def policy_page(reply: Any) -> Tuple[str, List[Policy]]:
    """RL.POLICY LIST's reply: ``[next_cursor, [[name, digest, [words...]], ...]]``."""
    if not _is_array(reply) or len(reply) != 2 or not _is_array(reply[1]):
        raise _shape_error(reply, "an RL.POLICY LIST reply")
    page = []
    for entry in reply[1]:
        if not _is_array(entry) or len(entry) != 3 or not _is_array(entry[2]):
            raise _shape_error(reply, "an RL.POLICY LIST reply")
        page.append(Policy(_text(entry[0]), _text(entry[1]), tuple(_text(w) for w in entry[2])))
    return _text(reply[0]), page


def policy_words(reply: Any) -> Optional[Tuple[str, ...]]:
    """RL.POLICY GET's reply: the definition's words, or None when there is no such policy."""
    if reply is None:
        return None
    if not _is_array(reply):
        raise _shape_error(reply, "an RL.POLICY GET reply")
    return tuple(_text(w) for w in reply)


@dataclass(frozen=True)
class TopEntry:
    """One entry of RL.TOP: a subject (under ``POLICY``) or a key, cut to 64 bytes, as the
    redis client returns strings; its refusals over the last one to two windows were at most
    ``count`` and at least ``count - error``."""

    name: Text
    count: int
    error: int


def top_entries(reply: Any) -> List[TopEntry]:
    if not _is_array(reply):
        raise _shape_error(reply, "an RL.TOP reply")
    out = []
    for entry in reply:
        if not _is_array(entry) or len(entry) != 3:
            raise _shape_error(reply, "an RL.TOP reply")
        out.append(TopEntry(entry[0], int(entry[1]), int(entry[2])))
    return out


def ok(reply: Any) -> bool:
    """RL.POLICY SET's ``OK`` (redis-py may have turned it into True)."""
    return reply is True or _text(reply) == "OK"
