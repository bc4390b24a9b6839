"""The package's lazy top-level names."""

import importlib

import pytest

import leakloss


@pytest.mark.parametrize("name", [n for n in leakloss.__all__ if n != "__version__"])
def test_every_top_level_name_resolves_to_its_object(name):
    # NepaliFrontend pointed at leakloss.text.g2p, where it does not live: an AttributeError, and
    # `from leakloss import *` failed whole
    obj = getattr(leakloss, name)
    assert getattr(obj, "__name__", name) == name
    assert obj is getattr(importlib.import_module(leakloss._EXPORTS[name]), name)


def test_an_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="has no attribute 'nope'"):
        leakloss.nope  # noqa: B018
