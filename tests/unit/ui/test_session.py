"""``as_user``, the one way a UI handler receives its user: filled through Gradio's own injection (``special_args``),
with the handler's parameters shown to Gradio as its own."""

from __future__ import annotations

import inspect

import gradio as gr
import pytest
from gradio import utils
from gradio.helpers import special_args

from backend.api import User, local_user
from components.session import SIGN_IN_FIRST, as_user
from components.wiring import bind

ANN = {"preferred_username": "ann", "name": "Ann", "profile": "", "picture": ""}


def _request(signed_in: bool = True, **attributes) -> gr.Request:
    """A request as Gradio rebuilds one for its queue: Ann's OAuth session (or none), and ``attributes``."""
    info = {"userinfo": ANN, "access_token": "hf_ann", "scope": "openid", "expires_at": None}
    return gr.Request(session={"oauth_info": info} if signed_in else {}, **attributes)


def _called(handler, inputs: list, request: gr.Request):
    """What Gradio's call of ``handler`` returns: the inputs with what it injects, as ``Blocks.call_function`` does."""
    args, *_ = special_args(handler, list(inputs), request=request)
    return handler(*args)


def _opened(api, user, job_choice, request: gr.Request, source="rows") -> tuple:
    """A handler that reads the request (a deep link) and has an optional input."""
    return api, user, job_choice, dict(request.query_params), source


def _played(api, user, job_choice, episodes=1):
    """A streaming handler."""
    for episode in range(episodes):
        yield user, job_choice, episode


def test_the_handler_receives_the_signed_in_user_and_the_request_and_keeps_its_optional_inputs():
    handler = as_user(bind(_opened, "api"), signed_in=False)
    assert list(inspect.signature(handler).parameters) == ["profile", "token", "job_choice", "request", "source"]
    # What gradio_client is told: the inputs are the handler's own, the one with a default optional.
    assert [(name, optional) for name, optional, *_ in utils.get_function_params(handler)] == [
        ("job_choice", False),
        ("source", True),
    ]
    api, user, job, query, source = _called(handler, ["j1"], _request(query_params={"job": "j1"}))
    assert (api, user, job, query, source) == ("api", User("ann"), "j1", {"job": "j1"}, "rows")
    assert user.token == "hf_ann"
    assert (handler.__name__, handler.__doc__) == ("_opened", _opened.__doc__)


def test_a_streaming_handler_still_streams_with_its_user():
    handler = as_user(bind(_played, "api"))
    assert inspect.isgeneratorfunction(handler)
    assert list(_called(handler, ["j1", 2], _request())) == [(User("ann"), "j1", 0), (User("ann"), "j1", 1)]
    assert list(handler(None, None, "j1", episodes=1)) == [(local_user(), "j1", 0)]  # by name, as inputs_kwargs do


def test_a_visitor_on_a_space_is_refused_with_the_sentence_or_handed_in_as_none(monkeypatch):
    monkeypatch.setenv("SPACE_ID", "studio/space")
    with pytest.raises(gr.Error) as refused:
        _called(as_user(bind(_opened, "api")), ["j1"], _request(signed_in=False, query_params={}))
    assert refused.value.message == SIGN_IN_FIRST
    shown = _called(as_user(bind(_opened, "api"), signed_in=False), ["j1"], _request(signed_in=False, query_params={}))
    assert shown[1] is None
    assert _called(as_user(bind(_opened, "api")), ["j1"], _request(query_params={}))[1] == User("ann")
