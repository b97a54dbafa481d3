"""Deep-link parsing (components/deep_links.py): its doctests are its tests."""

import doctest

import components.deep_links


def test_the_doctests_hold():
    assert doctest.testmod(components.deep_links).failed == 0
