"""The facade is the only door: it exports what it lists. That the UI imports nothing of the backend but
``backend.api``, and no circle among UI modules, is checked with every other import rule in
tests/unit/repo/test_layers.py."""

import pytest


def test_the_facade_exports_what_it_lists():
    import backend.api as api

    missing = [name for name in api.__all__ if not hasattr(api, name)]
    lazy = {name: getattr(api, name) for name in api._LAZY_EXPORTS}  # imported on first use, each resolves
    assert not missing and all(lazy.values())
    with pytest.raises(AttributeError):
        api.no_such_name  # noqa: B018 - the module's __getattr__ refuses unknown names
