"""A record without headers packed into one bytes object while it waits (``records.pack``)
and made a ``Parsed`` again as it leaves the core (``records.unpack``)."""

from __future__ import annotations

import math
import sys

from hypothesis import given
from hypothesis import strategies as st

from fairstream.adapters.tenant_series import OTHER
from fairstream.core import FairScheduler, ManualClock, TenantPolicy
from fairstream.scheduler.emitter.backlog import COMPACT_AT, Departures, worth_packing
from fairstream.scheduler.emitter.demotions import oldest_quiet_age
from fairstream.scheduler.observe import backlog_top
from fairstream.scheduler.records import Parsed, enqueued_of, new, pack, unpack


@given(
    st.integers(-(2**31), 2**31 - 1),
    st.integers(0, 2**63 - 1),
    st.integers(0, 2**63 - 1),
    st.binary(max_size=300),
    st.text(min_size=1, max_size=20),
)
def test_a_packed_record_unpacks_to_the_record_it_was(
    partition: int, offset: int, enqueued: int, value: bytes, tenant: str
) -> None:
    record = new(Parsed, (partition, offset, tenant, 1, None, enqueued, value, None))
    packed = pack(partition, offset, enqueued, value)
    assert type(packed) is bytes
    assert unpack(tenant, packed) == record


def test_a_parsed_record_is_left_as_it_is() -> None:
    record = new(Parsed, (0, 7, "a", 3, 1_000, 5, b"v", None))
    assert unpack("a", record) is record


def test_packed_a_record_costs_less_than_half_its_parsed_form_beside_its_value() -> None:
    value = b"x" * 100
    offset, enqueued = 10**9 + 7, 1_767_225_600_000
    record = new(Parsed, (3, offset, "a", 1, None, enqueued, value, None))
    # The tuple, its own offset int, and the value's object (the tenant id, cost and
    # timestamp are shared with other records).
    parsed = sys.getsizeof(record) + sys.getsizeof(offset) + sys.getsizeof(value) - len(value)
    packed = sys.getsizeof(pack(3, offset, enqueued, value)) - len(value)
    assert packed * 2 < parsed


def test_the_oldest_quiet_record_is_read_from_packed_heads_too() -> None:
    core: FairScheduler[Parsed] = FairScheduler(ManualClock())
    core.store_as(unpack)
    core.push("a", new(Parsed, (0, 1, "a", 1, None, 5_000, b"v", None)))
    core.push("b", pack(0, 2, 3_000, b"w"))  # type: ignore[arg-type]  # stored form
    core.push("c", pack(0, 3, 1_000, b"x"))  # type: ignore[arg-type]
    core.set_policy("c", TenantPolicy(paused=True))  # a paused tenant is not quiet
    assert enqueued_of(pack(0, 2, 3_000, b"w")) == 3_000
    assert oldest_quiet_age(core, None, 10_000) == 7.0  # b's, enqueued at 3 s
    top = backlog_top(core, 1)  # one record each: any one of them named, the others summed
    assert len(top) == 2
    assert top[OTHER] == 2


def test_departures_are_the_configured_rate_until_a_second_has_been_measured() -> None:
    departures = Departures()
    assert departures.before(0, 10.0, None) == math.inf  # unlimited, nothing measured yet
    departures.after(500)
    assert departures.before(300, 10.5, 40.0) == 40.0  # 200 left; under a second: the rate's
    departures.after(900)
    assert departures.before(600, 11.0, 40.0) == 500.0  # 500 left in the second
    departures.after(600)
    assert departures.before(600, 11.5, None) == 500.0  # the last measure holds meanwhile
    departures.after(600)
    assert departures.before(590, 13.0, None) == 5.0  # 10 left over two seconds
    departures.after(0)  # a rewind: the core replaced, empty
    departures.after(40)
    assert departures.before(40, 13.5, None) == 5.0
    assert departures.before(40, 14.0, None) == 5.0  # a second of none leaving: no measure
    departures.after(40)
    assert departures.before(39, 15.0, None) == 1.0


def test_a_warm_up_in_which_none_leaves_is_not_taken_for_a_slow_drain() -> None:
    departures = Departures()
    departures.after(150_000)  # indexed while the emitter warms up
    assert departures.before(150_000, 1.0, None) == math.inf
    assert departures.before(150_000, 2.5, None) == math.inf  # none left: still unknown
    assert not worth_packing(150_000, departures.before(150_000, 2.6, None))


def test_records_are_packed_only_where_they_will_wait() -> None:
    # At 100,000 waiting and 50,000 leaving a second (a backlog drained at full speed) the
    # next records would go within 2 s: not worth packing; at 5,000 a second, 20 s: packed.
    assert not worth_packing(100_000, 50_000.0)
    assert worth_packing(100_000, 5_000.0)
    assert not worth_packing(COMPACT_AT - 1, 0.0)
    assert not worth_packing(10**7, math.inf)
