"""A control's posted fields and address parts read strictly, and a refusal worded for the page.

A value that is not what the control sends raises :class:`BadInput`; :func:`problem` words it, or the contract's
:class:`~pydantic.ValidationError`, for the person who posted it: each problem after the label of the control it is
about, in plain words (:mod:`starter.review.wording`).
"""

from __future__ import annotations

from pydantic import ValidationError
from starlette.datastructures import FormData

from starter.review import wording
from starter.review.limits import InputRefused, parse_number


class BadInput(ValueError):
    """A posted field that is not what the control sends (not a number, missing).

    Attributes:
        field: The field or address part it is about (None: the post as a whole).
    """

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


def text(form: FormData, name: str) -> str:
    """The form's field ``name`` as text ("" when missing or a file)."""
    value = form.get(name)
    return value if isinstance(value, str) else ""


def number(value: str, name: str = "frame") -> int:
    """``value`` (a field or an address part called ``name``) as a whole number.

    Raises:
        BadInput: Not ASCII digits, or too many of them.
    """
    try:
        return parse_number(value, name)
    except InputRefused as err:
        raise BadInput(wording.unnamed(err, name), name) from err


def problem(err: Exception, *, control: str | None = None) -> str:
    """What was wrong with the input, for the page: each problem after its control's label, in plain words.

    Args:
        err: A :class:`~pydantic.ValidationError` of a message model, a :class:`BadInput`, or another refusal (its
            message as it is).
        control: The label of the control that sent the input, for a problem about no field of its own (the whole
            message, or a :class:`BadInput` without a field).
    """
    if isinstance(err, ValidationError):
        worded = []
        for found in err.errors():
            label = wording.message_label(err.title, found["loc"]) or control
            worded.append(wording.labelled(label, wording.plain(found, label)))
        return "; ".join(worded)
    field = err.field if isinstance(err, BadInput) else None
    return wording.labelled(wording.field_label(field) if field else control, str(err))
