"""The pure scheduling core: which tenant's record goes next, and when.

Weighted deficit round robin with priority classes (``FairScheduler``), token-bucket rate
limits (``EgressLimiter``, ``TokenBucket``), the rate adapted to the API's feedback
(``AdaptiveRate``, ``TenantPauses``), measured-cost corrections (``cost_correction``),
admission and deadline decisions, tenant policies and an injected clock. No Kafka, no
Faust, no asyncio, no threads: the service drives this from its loop, the ``simulate``
command from a trace, tests from a ManualClock.
"""

from fairstream.core.adaptive import AdaptiveRate, TenantPauses
from fairstream.core.admission import (
    ACCEPT,
    BACKLOG_FULL,
    EXPIRED,
    Decision,
    admit,
    check_deadline,
    is_expired,
)
from fairstream.core.clock import Clock, ManualClock, MonotonicClock
from fairstream.core.deficit import FairScheduler, Pick
from fairstream.core.ratelimit import EgressLimiter, TokenBucket
from fairstream.core.stats import (
    FairShareTracker,
    WindowFairness,
    backlogged_throughout,
    busy_periods,
    jain_index,
    percentile,
    window_fairness,
)
from fairstream.core.tenant import DEFAULT_POLICY, TenantPolicy
from fairstream.core.usage import cost_correction

__all__ = [
    "ACCEPT",
    "BACKLOG_FULL",
    "DEFAULT_POLICY",
    "EXPIRED",
    "AdaptiveRate",
    "Clock",
    "Decision",
    "EgressLimiter",
    "FairScheduler",
    "FairShareTracker",
    "ManualClock",
    "MonotonicClock",
    "Pick",
    "TenantPauses",
    "TenantPolicy",
    "TokenBucket",
    "WindowFairness",
    "admit",
    "backlogged_throughout",
    "busy_periods",
    "check_deadline",
    "cost_correction",
    "is_expired",
    "jain_index",
    "percentile",
    "window_fairness",
]
