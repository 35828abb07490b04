"""What type each switch of a program takes, read from its constructor.

The command line converts ``--set key=value`` text with it, and loading an artefact checks the
saved switches with it, so that a hand-edited ``"prefill": "false"`` is refused instead of read
as true.
"""

from __future__ import annotations

import math
import typing
from inspect import Parameter, signature
from typing import Any

_TYPE_WORDS = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}
#: The kind of a switch annotated ``float | str``: a number where the value reads as one.
NUMBER_OR_TEXT: Any = float | str
#: The kind of a switch annotated ``int | str``: an integer where the value reads as one
#: (ensemble's ``samples``: 4 or ``"direct=3,sea=2"``).
INTEGER_OR_TEXT: Any = int | str
_SCALAR_TYPES = (bool, int, float, str)  # bool before int: True is an int too


def _scalar_of(hint: Any, default: Any) -> tuple[type | None, bool]:
    """The scalar type a switch takes and whether None is allowed, from its default when that
    is a scalar (``linker: str | Module = "none"`` is set by name), else from its type hint:
    ``int``, ``int | None``, ``Optional[str]``, ``Literal["a", "b"]``. None for objects."""
    args = typing.get_args(hint)
    optional = default is None or type(None) in args or hint is type(None)
    if {a for a in args if a is not type(None)} == {float, str}:
        return NUMBER_OR_TEXT, optional  # e.g. ensemble's temperature: 0.7 or "direct=1.0"
    if {a for a in args if a is not type(None)} == {int, str}:
        return INTEGER_OR_TEXT, optional
    for kind in _SCALAR_TYPES:
        if default is not Parameter.empty and isinstance(default, kind):
            return kind, optional
    if hint in _SCALAR_TYPES:
        return hint, optional
    if typing.get_origin(hint) is typing.Literal and args:
        kinds = {type(a) for a in args}
        return (kinds.pop(), optional) if len(kinds) == 1 else (None, optional)
    members = [a for a in args if a is not type(None)]
    if len(members) == 1 and members[0] in _SCALAR_TYPES:
        return members[0], optional
    return None, optional


def switch_types(cls: type) -> dict[str, tuple[type | None, bool]]:
    """Each constructor parameter of a program class -> (scalar type or None, None allowed),
    read with ``typing.get_type_hints`` (annotations are strings under ``from __future__
    import annotations``; the hints resolve them in the class's module)."""
    try:
        hints = typing.get_type_hints(cls.__init__)
    except (NameError, TypeError):  # a hint naming something imported only for type checking
        hints = {}
    out: dict[str, tuple[type | None, bool]] = {}
    for name, param in signature(cls.__init__).parameters.items():
        if name == "self" or param.kind in (Parameter.VAR_POSITIONAL, Parameter.VAR_KEYWORD):
            continue
        out[name] = _scalar_of(hints.get(name, Any), param.default)
    return out


def switch_type_problem(name: str, value: Any, kind: type | None, optional: bool) -> str | None:
    """Why ``value`` (read from JSON) cannot be switch ``name`` of that kind, or None."""
    if value is None:
        return None if optional or kind is None else f"switch {name} cannot be null"
    number = isinstance(value, int | float) and not isinstance(value, bool)
    if number and isinstance(value, float) and not math.isfinite(value):
        return f"switch {name} must be a finite number, not {value!r}"
    if kind == NUMBER_OR_TEXT:
        ok = number or isinstance(value, str)
    elif kind == INTEGER_OR_TEXT:
        ok = (number and isinstance(value, int)) or isinstance(value, str)
    else:
        fits = {
            bool: isinstance(value, bool),
            int: number and isinstance(value, int),
            float: number,
            str: isinstance(value, str),
        }
        ok = fits.get(kind, True)
    if ok:
        return None
    words = _TYPE_WORDS.get(kind, "an integer or a text")
    return f"switch {name} expects {words}, not {value!r}"
