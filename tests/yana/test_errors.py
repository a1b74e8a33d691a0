"""The one table of error codes: every code has a status, helpers and the contract's map use it."""

from __future__ import annotations

import pytest

from api.contract.errors import RETRYABLE_STATUSES, http_error
from yana.errors import CODE_OF_STATUS, ERRORS, ErrorCode, YanaError, bad_request, conflict, internal, not_found


def test_every_code_has_one_spec():
    assert set(ERRORS) == set(ErrorCode)
    assert all(400 <= spec.status < 600 for spec in ERRORS.values())


def test_of_takes_status_and_retryable_from_the_table():
    err = YanaError.of(ErrorCode.FETCH_TIMEOUT, "slow")
    assert (err.code, err.status, err.retryable) == ("FETCH_TIMEOUT", 504, True)
    assert err.body() == {"code": "FETCH_TIMEOUT", "message": "slow", "retryable": True}
    assert type(err.body()["code"]) is str  # serialisable as a plain string
    over = YanaError.of(ErrorCode.FETCH_FAILED, "upstream 503", retryable=True)
    assert (over.status, over.retryable) == (502, True)


@pytest.mark.parametrize(
    ("helper", "code", "status", "retryable"),
    [
        (bad_request, "BAD_REQUEST", 400, False),
        (not_found, "NOT_FOUND", 404, False),
        (conflict, "CONFLICT", 409, False),
    ],
)
def test_helpers(helper, code, status, retryable):
    err = helper("m")
    assert (err.code, err.status, err.retryable, err.message) == (code, status, retryable, "m")
    assert (internal().status, internal().retryable) == (500, True)


def test_positional_constructor_still_works():
    err = YanaError("ITEM_CODE", "carried from a failed item", 422, True)
    assert (err.code, err.status, err.retryable) == ("ITEM_CODE", 422, True)


def test_framework_statuses_map_through_the_table():
    for status, code in CODE_OF_STATUS.items():
        err = http_error(status)
        assert err.code == code and err.status == status
        assert err.retryable == ERRORS[code].retryable
    assert {408, 429, 500, 502, 503, 504} == RETRYABLE_STATUSES
    assert http_error(418).code == "BAD_REQUEST" and http_error(501).code == "INTERNAL"
