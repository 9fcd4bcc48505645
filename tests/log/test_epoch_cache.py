"""Leader-epoch cache semantics (KIP-101 / KIP-279) and persistence."""

from __future__ import annotations

from rafka.log.epoch_cache import UNDEFINED_EPOCH, LeaderEpochCache

from .conftest import make_batch


def cache(tmp_path, leo=100):
    return LeaderEpochCache(tmp_path / "leader-epoch-checkpoint", lambda: leo)


def test_end_offset_for(tmp_path):
    c = cache(tmp_path)
    assert c.end_offset_for(0) == (UNDEFINED_EPOCH, -1) and c.latest_epoch is None
    c.assign(1, 0)
    c.assign(1, 5)  # same epoch later: no-op
    c.assign(3, 20)
    c.assign(5, 50)
    assert c.entries == [(1, 0), (3, 20), (5, 50)]
    assert c.end_offset_for(5) == (5, 100)  # latest epoch -> log end offset
    assert c.end_offset_for(1) == (1, 20)
    assert c.end_offset_for(2) == (1, 20)  # largest epoch <= 2 is 1, ends where 3 starts
    assert c.end_offset_for(4) == (3, 50)
    assert c.end_offset_for(0) == (0, 0)  # older than anything known
    assert c.end_offset_for(6) == (UNDEFINED_EPOCH, -1)
    assert c.epoch_for_offset(25) == 3


def test_truncation_and_persistence(tmp_path):
    c = cache(tmp_path)
    for e, o in [(1, 0), (2, 10), (4, 30), (6, 60)]:
        c.assign(e, o)
    c.truncate_from_end(30)
    assert c.entries == [(1, 0), (2, 10)]
    c.truncate_from_start(15)
    assert c.entries == [(2, 15)]
    c.assign(7, 40)
    again = cache(tmp_path)
    assert again.entries == [(2, 15), (7, 40)]
    text = (tmp_path / "leader-epoch-checkpoint").read_text()
    assert text == "0\n2\n2 15\n7 40\n"


def test_conflicting_assignment_replaces_newer_entries(tmp_path):
    c = cache(tmp_path)
    c.assign(1, 0)
    c.assign(3, 20)
    c.assign(2, 15)  # older epoch at a lower offset wins (replay after truncation)
    assert c.entries == [(1, 0), (2, 15)]


def test_corrupt_checkpoint_is_set_aside(tmp_path):
    (tmp_path / "leader-epoch-checkpoint").write_text("0\n3\n1 0\n")
    c = cache(tmp_path)
    assert c.entries == [] and (tmp_path / "leader-epoch-checkpoint.corrupt").exists()


def test_partition_log_maintains_its_cache(open_log):
    log = open_log({"segment.bytes": "1000", "retention.ms": "1", "file.delete.delay.ms": "0"})
    for epoch in (0, 0, 2, 2, 5):
        for _ in range(5):
            log.append(make_batch(2), epoch)
    assert log.epochs.entries == [(0, 0), (2, 20), (5, 40)]
    log.truncate_to(30)
    assert log.epochs.entries == [(0, 0), (2, 20)]
    assert log.epochs.end_offset_for(2) == (2, 30)
    log.close()
    log = open_log({"segment.bytes": "1000", "retention.ms": "1", "file.delete.delay.ms": "0"})
    assert log.epochs.entries == [(0, 0), (2, 20)]
    expected_epoch = log.epochs.epoch_for_offset(log.active_segment.base_offset)
    assert log.enforce_retention(10**15)
    assert log.epochs.earliest_entry == (expected_epoch, log.log_start_offset)


def test_unclean_recovery_relearns_epochs_from_headers(open_log):
    log = open_log()
    log.append(make_batch(1), 3)
    log.append(make_batch(1), 4)
    log._crash()
    (log.directory / "leader-epoch-checkpoint").unlink()
    log = open_log()
    assert log.epochs.entries == [(3, 0), (4, 1)]
