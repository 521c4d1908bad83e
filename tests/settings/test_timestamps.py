"""decisionflow.timestamps agrees with protobuf's own converters over the whole valid range and
refuses what they refuse."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from google.protobuf.timestamp_pb2 import Timestamp
from hypothesis import given
from hypothesis import strategies as st

from decisionflow.timestamps import MAX_SECONDS, MIN_SECONDS, from_timestamp, to_timestamp

AWARE = st.datetimes(
    min_value=datetime(1, 1, 2),  # a day inside year 1, so every offset below stays in range
    max_value=datetime(9999, 12, 30),
    timezones=st.sampled_from([UTC, timezone(timedelta(hours=5, minutes=30)), timezone(timedelta(hours=-8))]),
)


@given(AWARE)
def test_to_timestamp_matches_from_datetime(moment: datetime) -> None:
    expected = Timestamp()
    expected.FromDatetime(moment)
    assert to_timestamp(moment) == expected


@given(st.datetimes(min_value=datetime(1, 1, 1), max_value=datetime(9999, 12, 31, 23, 59, 59, 999_999)))
def test_naive_datetimes_are_taken_as_utc(moment: datetime) -> None:
    expected = Timestamp()
    expected.FromDatetime(moment)
    assert to_timestamp(moment) == expected
    assert from_timestamp(to_timestamp(moment)) == moment.replace(tzinfo=UTC)


@given(st.integers(MIN_SECONDS, MAX_SECONDS), st.integers(0, 999_999_999))
def test_from_timestamp_matches_to_datetime(seconds: int, nanos: int) -> None:
    stamp = Timestamp(seconds=seconds, nanos=nanos)
    parsed = from_timestamp(stamp)
    assert parsed == stamp.ToDatetime(tzinfo=UTC)
    assert parsed.utcoffset() == timedelta(0)


@given(AWARE)
def test_round_trip_keeps_the_instant(moment: datetime) -> None:
    assert from_timestamp(to_timestamp(moment)) == moment


@pytest.mark.parametrize(
    ("seconds", "nanos"),
    [(MIN_SECONDS - 1, 0), (MAX_SECONDS + 1, 0), (0, -1), (0, 1_000_000_000), (2**62, 0)],
)
def test_from_timestamp_refuses_what_protobuf_refuses(seconds: int, nanos: int) -> None:
    stamp = Timestamp(seconds=seconds, nanos=nanos)
    with pytest.raises(ValueError, match="timestamp"):
        from_timestamp(stamp)
    with pytest.raises(ValueError):
        stamp.ToDatetime(tzinfo=UTC)


def test_to_timestamp_refuses_instants_before_year_one_utc() -> None:
    east = datetime(1, 1, 1, 0, 30, tzinfo=timezone(timedelta(hours=1)))  # 0000-12-31T23:30Z
    with pytest.raises(ValueError, match="years 1 to 9999"):
        to_timestamp(east)
