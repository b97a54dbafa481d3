"""Binding a tab's module-level handlers to what they act on (the facade, the tab's handles) for Gradio's events."""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable
from typing import Any


def bind(fn: Callable[..., Any], *bound: Any) -> Callable[..., Any]:
    """``fn`` with its first parameters filled by ``bound``: the handler an event runs.

    Gradio reads a handler's signature and type hints to fill ``gr.OAuthProfile`` / ``gr.OAuthToken`` parameters and
    to stream a generator's answers; ``functools.partial`` hides both, so the bound handler carries ``fn``'s own,
    less the bound parameters (its return type kept), and its name (an event's default API name).
    """
    if inspect.isgeneratorfunction(fn):

        def handler(*args, **kwargs):
            yield from fn(*bound, *args, **kwargs)
    else:

        def handler(*args, **kwargs):
            return fn(*bound, *args, **kwargs)

    signature = inspect.signature(fn)
    params = list(signature.parameters.values())[len(bound) :]
    names = {p.name for p in params} | {"return"}  # gr.api reads its outputs from the return type
    handler.__signature__ = signature.replace(parameters=params)  # type: ignore[attr-defined]
    handler.__annotations__ = {k: v for k, v in typing.get_type_hints(fn).items() if k in names}
    handler.__name__, handler.__qualname__, handler.__doc__ = fn.__name__, fn.__name__, fn.__doc__
    return handler
