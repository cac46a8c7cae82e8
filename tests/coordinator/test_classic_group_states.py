"""The classic group state table: every (state, event) pair is either a listed transition or refused."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

import pytest

from kbroker.coordinator.group.classic_group import (
    TRANSITIONS,
    VALID_PREVIOUS_STATES,
    ClassicGroup,
    ClassicGroupEvent,
    ClassicGroupState,
    IllegalStateTransition,
    next_state,
)

S = ClassicGroupState


@given(state=st.sampled_from(ClassicGroupState), event=st.sampled_from(ClassicGroupEvent))
def test_every_pair_is_a_transition_or_refused(state, event):
    group = ClassicGroup("g", state=state)
    if (state, event) in TRANSITIONS:
        assert group.transition(event, 5) is TRANSITIONS[(state, event)]
        assert group.state is TRANSITIONS[(state, event)]
    else:
        with pytest.raises(IllegalStateTransition):
            group.transition(event, 5)
        assert group.state is state


def test_valid_previous_states_are_kafkas():
    assert VALID_PREVIOUS_STATES == {
        S.PREPARING_REBALANCE: {S.STABLE, S.COMPLETING_REBALANCE, S.EMPTY},
        S.COMPLETING_REBALANCE: {S.PREPARING_REBALANCE},
        S.STABLE: {S.COMPLETING_REBALANCE},
        S.DEAD: {S.STABLE, S.PREPARING_REBALANCE, S.COMPLETING_REBALANCE, S.EMPTY},
        S.EMPTY: {S.PREPARING_REBALANCE},
    }


def test_nothing_leaves_dead():
    for event in ClassicGroupEvent:
        if event is not ClassicGroupEvent.DELETE:
            with pytest.raises(IllegalStateTransition):
                next_state(S.DEAD, event)


def test_transition_records_previous_state_and_time():
    group = ClassicGroup("g")
    group.transition(ClassicGroupEvent.PREPARE_REBALANCE, 100)
    assert (group.state, group.previous_state, group.state_timestamp_ms) == (S.PREPARING_REBALANCE, S.EMPTY, 100)


def test_state_names_parse_case_insensitively():
    assert ClassicGroupState.parse("stable") is S.STABLE
    assert ClassicGroupState.parse("PREPARINGREBALANCE") is S.PREPARING_REBALANCE
    assert ClassicGroupState.parse("nope") is None
