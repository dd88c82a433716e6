"""The option table (settings/options.py): choices come from the settings fields' `Literal`
types, defaults from the settings types; a mistyped word is exit 2 naming the option."""

from __future__ import annotations

from typing import get_args

import pytest

from facefusion_batch.errors import EXIT_USAGE, InputError
from facefusion_batch.faces.classify import RACE_NAMES, RACES
from facefusion_batch.faces.select import FACE_ORDER_NAMES, FACE_ORDERS
from facefusion_batch.farm.plan import FORMATS
from facefusion_batch.settings import options
from facefusion_batch.settings.types import PlanFormat, PlanSettings

WORDED = [o for o in options.RENDER if o.words is not None]


def test_every_choice_list_is_its_fields_literal():
    assert {o.name for o in WORDED} >= {"faces", "blend", "colour", "eyes_mouth", "precision", "face_order"}
    assert all(o.choices is None for o in options.RENDER)  # none spelt in the table itself
    assert tuple(FACE_ORDERS) == FACE_ORDER_NAMES and set(RACES) == set(RACE_NAMES)
    assert FORMATS == get_args(PlanFormat)


@pytest.mark.parametrize("option", WORDED, ids=lambda o: o.name)
def test_a_mistyped_word_is_refused_naming_the_option(option):
    word = option.words[-1]
    with pytest.raises(InputError) as caught:
        options.render_settings({option.name: word[:-1] + "X"}, resolve=False)
    assert caught.value.exit_code == EXIT_USAGE
    assert str(caught.value).startswith(f"{option.flag} must be one of {', '.join(option.words)}")
    assert f"(did you mean {word}?)" in str(caught.value)


def test_plan_defaults_are_the_plan_settings():
    plan = {o.name: o for o in options.PLAN}
    assert plan["chunk_frames"].cli_default == PlanSettings().chunk_frames == 1500
    assert plan["format"].cli_default == "shell" and plan["format"].words == FORMATS
