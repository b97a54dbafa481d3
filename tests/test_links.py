"""Deep-link parsing (components/links.py): its doctests are its tests."""

import doctest

import components.links


def test_the_doctests_hold():
    assert doctest.testmod(components.links).failed == 0
