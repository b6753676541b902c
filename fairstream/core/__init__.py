"""The pure scheduling core: which tenant's record goes next, and when.

The emission rule (``EmissionRule``: pace, pick, expire at emit time, cost tokens, the
Retry-After hold, tenant pauses and the rate share; it answers a ``Pick``, an ``Expire`` or
a ``Wait``) over weighted deficit round robin with priority classes (``FairScheduler``, or
``GroupScheduler`` for two levels: groups, then their members), dominant-resource charges
under two limits (``DominantCharge``), the demotion of noisy tenants (``Demotion``) and
token-bucket rate limits (``EgressLimiter``, ``TokenBucket``); the rate adapted to the
API's feedback (``AdaptiveRate``, ``TenantPauses``), the concurrency found from it
(``ConcurrencyLimit``), measured-cost corrections
(``cost_correction``), budgets over time (``Budget``, ``BudgetLedger``), admission
decisions, tenant policies and an injected clock. No Kafka,
no Faust, no asyncio, no threads: the service's emitter and the ``simulate`` command drive
the same ``EmissionRule``, tests drive it from a ManualClock.
"""

from fairstream.core.adaptive import AdaptiveRate, TenantPauses
from fairstream.core.admission import (
    ACCEPT,
    BACKLOG_FULL,
    Decision,
    admit,
)
from fairstream.core.budget import Budget, BudgetLedger, format_budget, parse_budget
from fairstream.core.clock import Clock, ManualClock, MonotonicClock, RecordClock
from fairstream.core.credit import ConcurrencyLimit
from fairstream.core.deficit import FairScheduler, Pick
from fairstream.core.demotion import Demotion, DemotionPolicy
from fairstream.core.dominant import DominantCharge
from fairstream.core.emission import EmissionRule, Expire, Wait
from fairstream.core.hierarchy import Core, GroupScheduler
from fairstream.core.ratelimit import EgressLimiter, TokenBucket
from fairstream.core.tenant import DEFAULT_POLICY, TenantPolicy
from fairstream.core.usage import cost_correction

__all__ = [
    "ACCEPT",
    "BACKLOG_FULL",
    "DEFAULT_POLICY",
    "AdaptiveRate",
    "Budget",
    "BudgetLedger",
    "Clock",
    "ConcurrencyLimit",
    "Core",
    "Decision",
    "Demotion",
    "DemotionPolicy",
    "DominantCharge",
    "EgressLimiter",
    "EmissionRule",
    "Expire",
    "FairScheduler",
    "GroupScheduler",
    "ManualClock",
    "MonotonicClock",
    "Pick",
    "RecordClock",
    "TenantPauses",
    "TenantPolicy",
    "TokenBucket",
    "Wait",
    "admit",
    "cost_correction",
    "format_budget",
    "parse_budget",
]
