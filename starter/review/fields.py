"""A control's posted fields and address parts read strictly, and a refusal worded for the page.

A value that is not what the control sends raises :class:`BadInput`; :func:`problem` words it, or the contract's
:class:`~pydantic.ValidationError`, for the person who posted it.
"""

from __future__ import annotations

from pydantic import ValidationError
from starlette.datastructures import FormData

from starter.review.limits import InputRefused, parse_number


class BadInput(ValueError):
    """A posted field that is not what the control sends (not a number, missing)."""


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
        raise BadInput(str(err)) from err


def problem(err: Exception) -> str:
    """What was wrong with the input, for the page: each field of a validation error, or the error's message."""
    if isinstance(err, ValidationError):
        return "; ".join(
            f"{'.'.join(str(part) for part in p['loc']) or 'input'}: {p['msg'].removeprefix('Value error, ')}"
            for p in err.errors()
        )
    return str(err)
