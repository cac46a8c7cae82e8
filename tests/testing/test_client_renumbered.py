"""The fault campaign tells librdkafka's re-sends under a bumped producer epoch (librdkafka issue #4953) apart from a
broker that writes a retry twice (kbroker.testing.fault_campaign.client_renumbered), from the batches' producer
epochs and the producer's eos log."""

from __future__ import annotations

from kbroker.testing.fault_campaign import client_renumbered

BUMP = "DRAIN ... Beginning partition drain in state Assigned for PID{Id:0,Epoch:0} epoch bump for 1 partition(s)"
#: partition 0: producer 0 wrote offsets 0-5 in epoch 0, then the same records again at 6-11 in epoch 1; offsets
#: 12-17 epoch 1 again (a retry written twice would look like this); producer 7 wrote 18-23 in epoch 0
BATCHES = {0: [(0, 5, 0, 0, 0), (6, 11, 0, 1, 0), (12, 17, 0, 1, 6), (18, 23, 7, 0, 0)]}


def test_a_copy_under_a_bumped_epoch_is_the_clients():
    dup = ("rep", 0, b"v-1", [1, 7])
    assert client_renumbered([dup], BATCHES, BUMP) == [dup]


def test_copies_under_one_epoch_are_the_brokers():
    dup = ("rep", 0, b"v-2", [7, 13])  # both in epoch 1: a retry the broker did not recognise
    assert client_renumbered([dup], BATCHES, BUMP) == []


def test_no_epoch_bump_in_the_log_means_the_broker():
    assert client_renumbered([("rep", 0, b"v-1", [1, 7])], BATCHES, "NEWPID ... changed PID{Invalid}") == []


def test_copies_of_two_producers_or_outside_the_log_are_the_brokers():
    assert client_renumbered([("rep", 0, b"v-3", [1, 19])], BATCHES, BUMP) == []  # producers 0 and 7
    assert client_renumbered([("rep", 0, b"v-4", [1, 99])], BATCHES, BUMP) == []  # no batch holds 99
    assert client_renumbered([("rep", 1, b"v-5", [1, 7])], BATCHES, BUMP) == []  # no batches of partition 1
