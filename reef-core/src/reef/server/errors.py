"""The typed errors of the service; each becomes one JSON answer naming the field and reason.

A route raises, the application turns the error into an :class:`ErrorBody` with its status
(:func:`reef.server.bodies.error_answer`). Nothing is stored on the way to any of them: every
check runs before the one write that admits a request.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, TypeAlias

import attrs

from reef.errors import ReefError

#: Why a report is refused, as the rules name it (P-REP-1, P-REP-2, P-REP-3).
RejectionReason: TypeAlias = Literal[
    "schema", "missing", "wrong-kind", "duplicate", "foreign", "inner", "eligibility"
]


@attrs.frozen
class ErrorDetail:
    """What is wrong with a request.

    :ivar field: where: a JSON path into the body (``$.references[1]``), a header name, or a
        path parameter.
    :ivar reason: what is wrong, in words a client can act on.
    """

    field: str
    reason: str


@attrs.frozen
class ErrorBody:
    """The body of every 4xx (and 5xx) answer.

    :ivar error: a short code (``invalid_request``, ``unauthorized``, ``conflict``, ...).
    :ivar message: the first problem as one line.
    :ivar problems: every problem found.
    """

    error: str
    message: str
    problems: tuple[ErrorDetail, ...] = ()


class ApiError(ReefError):
    """A request the service refuses.

    :ivar status: the HTTP status (4xx).
    :ivar code: a short code for the body's ``error``.
    :ivar problems: every problem, each with its field and reason.
    """

    def __init__(self, status: int, code: str, problems: Sequence[ErrorDetail]) -> None:
        if not problems:
            raise ValueError("an ApiError names at least one problem")
        first = problems[0]
        super().__init__(f"{first.reason} @ {first.field}")
        self.status = status
        self.code = code
        self.problems = tuple(problems)

    @classmethod
    def one(cls, status: int, code: str, field: str, reason: str) -> ApiError:
        """An error of a single problem."""
        return cls(status, code, [ErrorDetail(field, reason)])


class ReportRejected(ApiError):
    """A report that admission refuses (400), with the rules' reason for it.

    :ivar reason: ``missing``, ``wrong-kind``, ``duplicate``, ``foreign``, ``inner``,
        ``eligibility`` or ``schema``.
    :ivar field: the JSON path of the offending value.
    """

    def __init__(self, reason: RejectionReason, field: str, message: str) -> None:
        super().__init__(400, f"report_rejected:{reason}", [ErrorDetail(field, message)])
        self.reason: RejectionReason = reason
        self.field = field


class UploadRejected(ApiError):
    """A data item a scenario refuses (400): no trainer takes uploads, or a trainer's
    ``uploaded_sample`` refused the trajectory (P-UP-3, P-UP-5).

    :ivar item_id: the refused item (the trajectory).
    """

    def __init__(self, item_id: str, field: str, message: str) -> None:
        super().__init__(400, "upload_rejected", [ErrorDetail(field, message)])
        self.item_id = item_id


class ServiceConfigError(ReefError, ValueError):
    """The service cannot start as configured (an engine URL it cannot use, a proxy setting it
    cannot speak to, a local engine the runtime lacks); the message names the scenario."""
