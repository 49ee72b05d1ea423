"""A schedule field is declared once (``ScheduleCreate``); the update, the public shape and
the row follow it, so a field added there cannot be dropped by an edit or left unshown."""

from __future__ import annotations

import pytest

from agentcron.core.errors import InvalidSchedule
from agentcron.core.specs import NULLABLE, SETTINGS, ScheduleCreate, ScheduleUpdate
from agentcron.web.api.schemas import ScheduleOut


def test_update_fields_keep_the_bounds_and_checks_of_create() -> None:
    # That the public shape and the row hold each of them:
    # tests/integration/test_edit_keeps_fields.py::test_the_loaded_schedules_cover_every_field.
    assert tuple(ScheduleUpdate.model_fields) == SETTINGS
    for name, field in ScheduleCreate.model_fields.items():
        patched = ScheduleUpdate.model_fields[name]
        assert patched.default is None and patched.description == field.description, name
        assert patched.metadata == field.metadata, name  # the same bounds
    with pytest.raises(ValueError, match="must not be blank"):
        ScheduleUpdate.model_validate({"name": "  "})
    with pytest.raises(ValueError, match="less than or equal to 100"):
        ScheduleUpdate.model_validate({"max_attempts": 101})
    with pytest.raises(ValueError, match="Extra inputs"):
        ScheduleUpdate.model_validate({"nmae": "typo"})


def test_a_null_is_refused_except_for_nullable_fields() -> None:
    for name in SETTINGS:
        patch = ScheduleUpdate.model_validate({name: None})
        if name in NULLABLE:
            assert patch.changes() == {name: None}
        else:
            with pytest.raises(InvalidSchedule) as refused:
                patch.changes()
            assert refused.value.field == name


def test_the_public_shape_shows_null_only_for_nullable_settings() -> None:
    schema = ScheduleOut.model_json_schema()["properties"]
    for name in SETTINGS:
        nullable = "anyOf" in schema[name] and {"type": "null"} in schema[name]["anyOf"]
        assert nullable == (name in NULLABLE), name


def test_the_run_history_filter_names_every_run_status() -> None:
    from typing import get_args

    from agentcron.core.specs import RunStatusName
    from agentcron.core.states import RunStatus

    assert set(get_args(RunStatusName)) == {status.value for status in RunStatus}
