from __future__ import annotations

import pytest

from ddpimg.runtime.stall.record import ProgressRecord, record_key


def test_a_record_survives_the_store() -> None:
    record = ProgressRecord(3, "node2", 4242, 17, 5, "backward", 100.5, 101.0, "failed", "boom")
    assert ProgressRecord.from_bytes(record.to_text().encode()) == record
    assert record_key(3) == "ddpimg/progress/3"


@pytest.mark.parametrize("data", [b"", b"not json", b"[1, 2]", b'{"rank": 1}', b"\xff"])
def test_what_is_not_a_record_reads_as_none(data: bytes) -> None:
    assert ProgressRecord.from_bytes(data) is None
