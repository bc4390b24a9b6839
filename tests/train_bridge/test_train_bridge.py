"""The bridge trainer end to end on a tiny budget (readings written here, not the corpus): a loadable bridge whose
card says what it was fitted on and how close it came; settings that cannot work are refused before any work."""

from __future__ import annotations

import json

import numpy as np
import pytest
import soundfile as sf

from tests.tiny_models import speechlike


def _readings(tmp_path, n=6):
    out = []
    for i in range(n):
        path = tmp_path / f"r{i}.wav"
        sf.write(path, speechlike(0.6 + 0.1 * i, seed=i).astype(np.float32), 16_000)
        out.append((f"voice{i % 2}", path))
    return out


def test_train_bridge_writes_a_loadable_bridge_no_worse_than_its_ridge_start(tmp_path, monkeypatch):
    import train_bridge.__main__ as tb
    from leakloss.config import compose_config
    from leakloss.mel_bridge import MelBridge

    monkeypatch.setattr(tb, "fitting_readings", lambda cfg: _readings(tmp_path))
    card = tb.run(compose_config("train_bridge", ["minutes=0.03", "bridge.hidden=8", "batch=2", "eval_every=2",
                                                  "heldback_fraction=0.34", f"out={tmp_path / 'b'}"]))
    assert card["steps"] > 0 and card["heldback_rmse_log10"] <= card["linear_only_heldback_rmse_log10"]
    assert "voice0" in card["fitted_on"] and "fest-slt" in card["fitted_on"]  # the kept-out voices are named
    bridge = MelBridge.embedded(tmp_path / "b")
    assert bridge.hidden == 8 and bridge.fit_card == json.loads((tmp_path / "b.json").read_text())
    assert not any(p.requires_grad for p in bridge.parameters())


def test_the_steps_after_the_last_evaluation_are_evaluated_and_the_better_of_them_and_the_ridge_kept(
        tmp_path, monkeypatch):
    """eval_every beyond the steps the budget allows: the Adam steps were discarded unchecked (and the card counted
    them). The last step is now evaluated: the weights kept are the ridge start (kept_step 0, its net's last conv
    zero, the linear error) or the last step's (a lower error), and the card says which."""
    import train_bridge.__main__ as tb
    from leakloss.config import compose_config
    from leakloss.mel_bridge import MelBridge

    monkeypatch.setattr(tb, "fitting_readings", lambda cfg: _readings(tmp_path))
    card = tb.run(compose_config("train_bridge", ["minutes=0.02", "bridge.hidden=8", "batch=2", "eval_every=100000",
                                                  "heldback_fraction=0.34", f"out={tmp_path / 'b'}"]))
    assert card["steps"] > 0 and card["kept_step"] in (0, card["steps"])
    bridge = MelBridge.embedded(tmp_path / "b")
    if card["kept_step"] == 0:
        assert card["heldback_rmse_log10"] == card["linear_only_heldback_rmse_log10"]
        assert float(bridge.net[-1].weight.abs().max()) == 0.0 and float(bridge.net[-1].bias.abs().max()) == 0.0
    else:
        # lower, as the card rounds both to 4 places (equal there when the step gained under 5e-5)
        assert card["heldback_rmse_log10"] <= card["linear_only_heldback_rmse_log10"]
        assert float(bridge.net[-1].weight.abs().max()) > 0.0


def test_readings_are_drawn_per_voice_and_the_unseen_family_is_refused(tmp_path):
    from leakloss.checks import SettingsError
    from train_bridge.__main__ import choose_readings

    by_voice = {"teacher0": [tmp_path / f"t{i}" for i in range(5)], "fest-kal": [tmp_path / "k0", tmp_path / "k1"]}
    chosen = choose_readings(by_voice, 3, seed=0)
    assert [v for v, _ in chosen] == ["fest-kal"] * 2 + ["teacher0"] * 3
    assert chosen == choose_readings(by_voice, 3, seed=0) != choose_readings(by_voice, 3, seed=1)
    for kept in ("fest-slt", "fest-ona", "flite-slt"):
        with pytest.raises(SettingsError, match=kept):
            choose_readings({**by_voice, kept: [tmp_path / "x"]}, 3, seed=0)


@pytest.mark.parametrize("override, message", [
    ("minutes=0", r"minutes must be a finite number in \(0, inf\), got 0"),
    ("per_voice=1", r"per_voice must be a whole number >= 2"),
    ("heldback_fraction=1", r"heldback_fraction must be a finite number in \(0, 1\)"),
    ("ridge_lambdas=[0]", r"ridge_lambdas must be a list of numbers in \(0, 1e\+12\]"),
    ("ridge_lambdas=5", r"ridge_lambdas must be a list of numbers"),  # a TypeError traceback
    ("ridge_lambdas=null", r"ridge_lambdas must be a list of numbers"),
    ("ridge_lambdas=[inf,1.0]", r"ridge_lambdas must be a list of numbers"),  # poisoned the choice after the audio
    ("ridge_lambdas=[1e308]", r"ridge_lambdas must be a list of numbers"),
    ("ridge_lambdas=[true]", r"ridge_lambdas must be a list of numbers"),  # the card said ridge_lambda: true
    ("roles=[bogus]", r"roles must be a list of teacher, hindi"),  # a ValueError traceback after the settings
    ("roles=[recorded]", r"roles must be a list of .*\(recorded voices: recorded_readings\)"),  # a traceback
    ("+bridge.in_bins=101", r"in_bins must be at most a Vocos mel's 100 bins"),  # a reshape error after the audio
    ("bridge.frozen=true", r"bridge: it has nothing to train"),
    ("bridge.kernel=4", r"bridge: ValueError: context must be a whole number >= 0 and kernel odd"),
    ("out=models/b.x", r"give a file stem without '.'"),
])
def test_settings_that_cannot_work_are_refused_before_any_work(tmp_path, monkeypatch, override, message):
    import train_bridge.__main__ as tb
    from leakloss.checks import SettingsError
    from leakloss.config import compose_config

    monkeypatch.setattr(tb, "fitting_readings", lambda cfg: pytest.fail("read audio before refusing"))
    with pytest.raises(SettingsError, match=message):
        tb.run(compose_config("train_bridge", [override]))


def test_an_output_stem_whose_file_is_a_folder_is_refused_before_any_work(tmp_path, monkeypatch):
    # refused by the write after the whole fit
    import train_bridge.__main__ as tb
    from leakloss.checks import SettingsError
    from leakloss.config import compose_config

    monkeypatch.setattr(tb, "fitting_readings", lambda cfg: pytest.fail("read audio before refusing"))
    for suffix in (".json", ".safetensors"):
        (tmp_path / f"b{suffix}").mkdir()
        with pytest.raises(SettingsError, match=rf"b{suffix} is a folder"):
            tb.run(compose_config("train_bridge", [f"out={tmp_path / 'b'}"]))
        (tmp_path / f"b{suffix}").rmdir()


def test_a_held_back_share_that_leaves_nothing_to_fit_is_a_settings_error(tmp_path, monkeypatch):
    # a raw torch.cat error in the ridge fit
    import train_bridge.__main__ as tb
    from leakloss.checks import SettingsError
    from leakloss.config import compose_config

    monkeypatch.setattr(tb, "fitting_readings", lambda cfg: _readings(tmp_path))
    with pytest.raises(SettingsError, match=r"heldback_fraction=0.95 holds back all 6 readings"):
        tb.run(compose_config("train_bridge", ["heldback_fraction=0.95", f"out={tmp_path / 'b'}"]))
