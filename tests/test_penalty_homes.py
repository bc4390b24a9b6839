"""The penalty, the reward and site placement have a home each; the names users imported from
``leakloss.penalty`` before the split still resolve there, to the same objects."""

import importlib

import pytest

import leakloss
import leakloss.penalty as penalty


@pytest.mark.parametrize("name", sorted(penalty._MOVED))
def test_moved_names_still_import_from_penalty_and_are_the_new_homes_objects(name):
    home = importlib.import_module(penalty._MOVED[name])
    assert getattr(penalty, name) is getattr(home, name)
    exec(f"from leakloss.penalty import {name}", {})  # the import statement form users wrote


def test_top_level_names_point_at_the_homes():
    from leakloss.reward import leak_reward
    from leakloss.site_placement import place_dataset_sites, place_sites

    assert leakloss.leak_reward is leak_reward
    assert leakloss.place_sites is place_sites and leakloss.place_dataset_sites is place_dataset_sites


def test_an_unknown_name_is_still_an_attribute_error():
    with pytest.raises(AttributeError):
        penalty.no_such_name  # noqa: B018


def test_lower_homes_never_import_the_reward():
    """Site placement sits below the reward; the penalty below both (no cycle, one direction)."""
    import ast
    from pathlib import Path

    root = Path(leakloss.__file__).parent
    for module, forbidden in (("penalty.py", {"leakloss.reward", "leakloss.site_placement"}),
                              ("site_placement.py", {"leakloss.reward"})):
        tree = ast.parse((root / module).read_text(encoding="utf-8"))
        imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
        assert not imported & forbidden, (module, imported & forbidden)
