"""One rule varies the options of generations that must not repeat each other: the
``n`` choices of a request and the retries of a sampling loop."""

from __future__ import annotations

from mellea.core.model_options import ModelOption, varied_options
from mellea.serve.options import CHOICE_TEMPERATURE, choice_options
from mellea.stdlib import session as session_module

SEED, TEMP = ModelOption.SEED, ModelOption.TEMPERATURE


def test_the_first_generation_keeps_its_options():
    options = {SEED: 7}
    assert varied_options(options, 0, 0.7) is options


def test_later_generations_get_the_next_seeds_and_a_sampling_temperature():
    assert varied_options({SEED: 7}, 2, 0.7) == {SEED: 9, TEMP: 0.7}
    assert varied_options({TEMP: None}, 1, 1.0) == {TEMP: 1.0}
    assert varied_options({TEMP: 0.2, SEED: 1}, 3, 1.0) == {TEMP: 0.2, SEED: 4}


def test_a_seed_near_the_top_counts_down():
    top = 2**63 - 1
    assert varied_options({SEED: top}, 2, 1.0)[SEED] == top - 2


def test_choices_and_retries_use_the_one_rule_with_their_own_temperature():
    assert choice_options({SEED: 5}, 3) == [
        {SEED: 5, TEMP: CHOICE_TEMPERATURE},
        {SEED: 6, TEMP: CHOICE_TEMPERATURE},
        {SEED: 7, TEMP: CHOICE_TEMPERATURE},
    ]
    assert choice_options({TEMP: 0.3}, 2) == [{TEMP: 0.3}, {TEMP: 0.3}]
    assert session_module.varied_options is varied_options
    assert session_module.RETRY_TEMPERATURE != CHOICE_TEMPERATURE
