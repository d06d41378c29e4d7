"""Limiter specifications: one kind and its parameters, as RL.ALL and RL.POLICY SET take them
(``SLIDE 100 60000``, ``TOKEN 10 1000 BURST 5``, ...), and as the headers advertise them.

    Slide(100, 60000)                       # at most 100 in any 60,000 ms
    Slide(10, 1000, (100, 60000))           # and at most 100 per minute, in one call
    Token(100000, 60000, cost=4000)         # a bucket, with a cost of its own
    Acquire(2, 30000)                       # 2 in flight, leases of 30 s

A spec's ``name`` names it in a policy (``RL.POLICY SET api minute SLIDE ...``) and in the
``RateLimit-Policy`` / ``RateLimit`` headers; it defaults to ``"default"``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, List, Optional, Tuple, Union

Word = Union[int, str]


def _cost(cost: Optional[int]) -> List[Word]:
    return [] if cost is None else ["COST", cost]


@dataclass(frozen=True)
class Spec:
    """What every kind shares: its keyword, its words, and the windows it enforces."""

    #: the keyword in RL.ALL and RL.POLICY SET; the command is ``RL.`` + it
    KIND = ""

    @property
    def command(self) -> str:
        return "RL." + self.KIND

    def params(self) -> List[Word]:
        """The words after the kind's keyword (or after the key, in its own command), without
        COST."""
        raise NotImplementedError

    @property
    def spec_name(self) -> str:
        return getattr(self, "name")

    @property
    def spec_cost(self) -> Optional[int]:
        return getattr(self, "cost")

    def words(self) -> List[Word]:
        """The limiter as RL.ALL and RL.POLICY SET take it: kind, parameters, options."""
        return [self.KIND, *self.params(), *_cost(self.spec_cost)]

    def args(self, key: Union[str, bytes], cost: Optional[int] = None) -> List[Any]:
        """The kind's own command on ``key``: ``cost`` when given, else the spec's own."""
        cost = self.spec_cost if cost is None else cost
        return [self.command, key, *self.params(), *_cost(cost)]

    def windows(self) -> List[Tuple[int, int]]:
        """The (quota, window_ms) pairs this limiter enforces, for ``RateLimit-Policy``."""
        params = self.params()
        return [(int(params[0]), int(params[1]))]

    def window_name(self, window_ms: int) -> str:
        """The name of one window in the headers: the spec's name, or, when it enforces
        several windows, the name with the window (``api-1000ms``)."""
        if len(self.windows()) == 1:
            return self.spec_name
        return f"{self.spec_name}-{window_ms}ms"


@dataclass(frozen=True, init=False)
class Slide(Spec):
    """RL.SLIDE: exact rolling windows, up to 8 (limit, window_ms) pairs in one call."""

    KIND = "SLIDE"
    pairs: Tuple[Tuple[int, int], ...]
    cost: Optional[int] = None
    name: str = "default"

    def __init__(
        self,
        limit: int,
        window_ms: int,
        *more: Tuple[int, int],
        cost: Optional[int] = None,
        name: str = "default",
    ) -> None:
        pairs = ((limit, window_ms),) + tuple((int(lim), int(ms)) for lim, ms in more)
        object.__setattr__(self, "pairs", pairs)
        object.__setattr__(self, "cost", cost)
        object.__setattr__(self, "name", name)

    def params(self) -> List[Word]:
        words: List[Word] = [w for pair in self.pairs for w in pair]
        return words

    def windows(self) -> List[Tuple[int, int]]:
        return list(self.pairs)


@dataclass(frozen=True)
class Token(Spec):
    """RL.TOKEN: a bucket of ``burst`` tokens (default ``limit``) refilled with ``limit``
    per ``window_ms``."""

    KIND = "TOKEN"
    limit: int
    window_ms: int
    burst: Optional[int] = None
    cost: Optional[int] = None
    name: str = "default"

    def params(self) -> List[Word]:
        words: List[Word] = [self.limit, self.window_ms]
        return words + ([] if self.burst is None else ["BURST", self.burst])


@dataclass(frozen=True)
class Leaky(Spec):
    """RL.LEAKY: a leaky bucket that schedules, answering an allowed call with the delay to
    wait (``Decision.delay_ms``)."""

    KIND = "LEAKY"
    limit: int
    window_ms: int
    maxdelay: Optional[int] = None
    burst: Optional[int] = None
    cost: Optional[int] = None
    name: str = "default"

    def params(self) -> List[Word]:
        words: List[Word] = [self.limit, self.window_ms]
        if self.maxdelay is not None:
            words += ["MAXDELAY", self.maxdelay]
        if self.burst is not None:
            words += ["BURST", self.burst]
        return words


@dataclass(frozen=True)
class Fixed(Spec):
    """RL.FIXED: a fixed window with a stable reset; ``align`` starts windows at multiples
    of ``window_ms`` since the Unix epoch (86400000: the UTC day)."""

    KIND = "FIXED"
    limit: int
    window_ms: int
    align: bool = False
    cost: Optional[int] = None
    name: str = "default"

    def params(self) -> List[Word]:
        words: List[Word] = [self.limit, self.window_ms]
        return words + (["ALIGN"] if self.align else [])


@dataclass(frozen=True)
class Subwin(Spec):
    """RL.SUBWIN: a rolling window approximated by sub-interval counters."""

    KIND = "SUBWIN"
    limit: int
    window_ms: int
    resolution_ms: int
    cost: Optional[int] = None
    name: str = "default"

    def params(self) -> List[Word]:
        return [self.limit, self.window_ms, self.resolution_ms]


@dataclass(frozen=True)
class Acquire(Spec):
    """RL.ACQUIRE as a limiter of RL.ALL or a policy: at most ``limit`` units in flight, each
    acquisition under a lease of ``lease_ms``; ``id`` renews a lease instead of taking a
    second unit (not in a policy: every call would share it)."""

    KIND = "ACQUIRE"
    limit: int
    lease_ms: int
    id: Optional[Union[str, bytes]] = None
    cost: Optional[int] = None
    name: str = "default"

    def params(self) -> List[Word]:
        words: List[Word] = [self.limit, self.lease_ms]
        if self.id is not None:
            words += ["ID", self.id]  # type: ignore[list-item]
        return words


@dataclass(frozen=True)
class Throttle(Spec):
    """CL.THROTTLE's bucket as a limiter of RL.ALL or a policy (``THROTTLE max_burst
    count_per_period period [quantity]``); its entry answers the five RL.* fields in
    milliseconds. For the command itself, see ``RateLimit.throttle``."""

    KIND = "THROTTLE"
    max_burst: int
    count_per_period: int
    period_s: int
    quantity: Optional[int] = None
    name: str = "default"
    cost: Optional[int] = field(default=None, init=False)

    @property
    def command(self) -> str:
        return "CL.THROTTLE"

    def params(self) -> List[Word]:
        words: List[Word] = [self.max_burst, self.count_per_period, self.period_s]
        return words + ([] if self.quantity is None else [self.quantity])

    def windows(self) -> List[Tuple[int, int]]:
        return [(self.count_per_period, self.period_s * 1000)]


#: Every spec, by its keyword.
KINDS = {cls.KIND: cls for cls in (Slide, Token, Leaky, Fixed, Subwin, Acquire, Throttle)}


def from_command(command: str, *params: Word, name: str = "default") -> Spec:
    """A spec from a command and the words after its key, as a configuration file would
    write it: ``from_command("RL.SLIDE", 10, 1000, 100, 60000)``. Options are read by name
    (``BURST``, ``MAXDELAY``, ``ALIGN``, ``ID``, ``COST``)."""
    kind = command.upper()
    kind = kind[3:] if kind.startswith("RL.") else kind
    if kind not in KINDS or kind == "THROTTLE":
        raise ValueError(f"not a limiter command: {command!r}")
    nums: List[int] = []
    opts: dict = {}
    words = list(params)
    i = 0
    while i < len(words) and (isinstance(words[i], int) or str(words[i]).lstrip("-").isdigit()):
        nums.append(int(words[i]))
        i += 1
    while i < len(words):
        word = str(words[i]).upper()
        if word == "ALIGN":
            opts["align"] = True
            i += 1
        elif word in ("BURST", "MAXDELAY", "COST", "ID") and i + 1 < len(words):
            value = words[i + 1]
            opts[word.lower()] = value if word == "ID" else int(value)
            i += 2
        else:
            raise ValueError(f"unknown option {words[i]!r} for {command}")
    if kind == "SLIDE":
        if len(nums) < 2 or len(nums) % 2:
            raise ValueError(f"RL.SLIDE takes limit window_ms pairs: {params!r}")
        more = [(nums[j], nums[j + 1]) for j in range(2, len(nums), 2)]
        return Slide(nums[0], nums[1], *more, name=name, **opts)
    cls: Any = KINDS[kind]
    return cls(*nums, name=name, **opts)
