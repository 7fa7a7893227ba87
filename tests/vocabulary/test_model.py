"""The strict frozen model (issue 25) and the one reading of pydantic's first error."""

from __future__ import annotations

import pytest
from pydantic import ConfigDict, ValidationError, field_validator

from servekit.errors import first_error, first_error_detail
from servekit.vocabulary import StrictModel


class _Point(StrictModel):
    x: int
    y: int = 0


class _Named(StrictModel):
    model_config = StrictModel.model_config | ConfigDict(populate_by_name=True)

    x: int


def test_unknown_fields_are_refused_and_values_cannot_change() -> None:
    with pytest.raises(ValidationError) as err:
        _Point.model_validate({"x": 1, "z": 2})
    assert first_error_detail(err.value).kind == "extra_forbidden"
    point = _Point(x=1)
    with pytest.raises(ValidationError):
        point.x = 2  # type: ignore[misc]


def test_a_model_extending_the_config_keeps_it_strict() -> None:
    assert _Named.model_config["frozen"] and _Named.model_config["extra"] == "forbid"
    assert _Named.model_config["populate_by_name"]


def test_the_first_error_carries_path_type_input_and_the_rest() -> None:
    with pytest.raises(ValidationError) as err:
        _Point.model_validate({"x": "a", "y": "b"})
    first = first_error_detail(err.value)
    assert first.loc == ("x",) and first.field == "x" and first.kind == "int_parsing"
    assert first.input == "a" and first.more == 1
    assert first_error(err.value) == ("x", first.msg)


class _Checked(StrictModel):
    port: int

    @field_validator("port")
    @classmethod
    def _port(cls, value: int) -> int:
        if not 1 <= value <= 65535:
            raise ValueError("--port: give 1..65535")
        return value


def test_a_validators_message_is_read_without_pydantics_prefix() -> None:
    with pytest.raises(ValidationError) as err:
        _Checked(port=0)
    first = first_error_detail(err.value)
    assert first.msg == "Value error, --port: give 1..65535"
    assert first.reason == "--port: give 1..65535"


def test_an_error_about_the_whole_document_is_named_by_top() -> None:
    with pytest.raises(ValidationError) as err:
        _Point.model_validate([1])
    assert first_error_detail(err.value, "(top)").field == "(top)"
