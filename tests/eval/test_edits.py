"""``leakloss.eval.edits``: the edits that descend a signal on the input (direction check, adversarial positives)."""

from __future__ import annotations

from types import SimpleNamespace

import torch

from leakloss.eval.edits import BandGain, VoicedInsert, descend, random_control, random_copies


def _two_vowels(seconds: float = 1.0) -> torch.Tensor:
    """A 140 Hz buzz with a silent gap at 0.4-0.6 s (a dropped vowel between two voiced stretches)."""
    t = torch.arange(int(16000 * seconds)) / 16000
    buzz = sum(torch.sin(2 * torch.pi * 140 * k * t) / k for k in range(1, 20))
    return (0.1 * buzz * ((t < 0.4) | (t > 0.6))).float()


def test_voiced_insert_starts_near_the_reading_and_edits_only_the_site_windows():
    wave, site = _two_vowels(), SimpleNamespace(start=0.45, end=0.55)
    edit = VoicedInsert(wave, [site])
    assert 120 < edit.f0 < 160
    start = edit()
    assert (start - wave).pow(2).mean().sqrt() < 0.02 * wave.pow(2).mean().sqrt()  # sigmoid(-4) of the level
    with torch.no_grad():
        edit.amplitude.fill_(8.0)
    full = edit()
    gap = slice(int(0.46 * 16000), int(0.54 * 16000))
    # at full amplitude the gap carries energy of the voice's own order, outside the windows nothing changes
    ratio = float(full[gap].pow(2).mean().sqrt() / wave[wave != 0].pow(2).mean().sqrt())
    assert 0.3 < ratio < 3.0
    outside = int((0.45 - 0.03) * 16000) - 400
    assert (full - wave)[:outside].abs().max() < 1e-5 and (full - wave)[-outside:].abs().max() < 1e-5


def test_voiced_insert_amplitudes_get_a_gradient():
    wave = _two_vowels()
    edit = VoicedInsert(wave, [SimpleNamespace(start=0.45, end=0.55)])
    edit()[int(0.46 * 16000): int(0.54 * 16000)].pow(2).sum().backward()
    assert edit.amplitude.grad.abs().sum() > 0 and torch.isfinite(edit.amplitude.grad).all()


def test_random_control_keeps_the_learned_sizes():
    wave, sites = _two_vowels(), [SimpleNamespace(start=0.45, end=0.55)]
    edit = VoicedInsert(wave, sites)
    with torch.no_grad():
        edit.log_gain.normal_(0, 0.3)
        edit.amplitude.normal_(-1.0, 0.5)
        edit.amplitude[:6] += 3.0  # the learned edit inserts in the low bands, where the voice is loud
    control = random_control(edit, lambda: VoicedInsert(wave, sites), torch.Generator().manual_seed(0))
    assert torch.allclose(control.log_gain.norm(), edit.log_gain.norm())

    def inserted(e):  # the magnitude the edit adds, per band and frame
        return e.level[:, None] * e.amplitudes()

    assert torch.allclose(inserted(control).norm(), inserted(edit).norm(), rtol=1e-4)
    assert (control.amplitudes() >= 0).all() and (control.amplitudes() <= 1).all()
    assert not torch.allclose(control.amplitudes(), edit.amplitudes())
    # a saturated learned map is matched too (the clip to 1 is part of the bisection)
    with torch.no_grad():
        edit.amplitude.fill_(12.0)
    control = random_control(edit, lambda: VoicedInsert(wave, sites), torch.Generator().manual_seed(1))
    assert torch.allclose(inserted(control).norm(), inserted(edit).norm(), rtol=1e-3)
    # the mel control draws as before the voiced domain came: one normal draw scaled to the learned norm
    gain = BandGain(wave, sites)
    with torch.no_grad():
        gain.log_gain.normal_(0, 0.3)
    control = random_control(gain, lambda: BandGain(wave, sites), torch.Generator().manual_seed(0))
    noise = torch.randn(gain.log_gain.shape, generator=torch.Generator().manual_seed(0))
    assert torch.allclose(control.log_gain, noise / noise.norm() * gain.log_gain.norm())



def test_a_band_gain_at_zero_gives_the_reading_back_and_cannot_fill_silence():
    wave, site = _two_vowels(), SimpleNamespace(start=0.45, end=0.55)
    edit = BandGain(wave, [site])
    assert torch.allclose(edit(), wave, atol=1e-5)
    with torch.no_grad():
        edit.log_gain.fill_(100.0)  # the largest gain the limit allows
    gap = slice(int(0.47 * 16000), int(0.53 * 16000))
    assert edit()[gap].abs().max() < 1e-4  # a gain times silence is silence: a dropped vowel stays dropped


def test_random_copies_are_noisy_scaled_shifted_versions():
    x = _two_vowels()
    copies = random_copies(x, 3, torch.Generator().manual_seed(0))
    assert copies.shape == (3, x.numel())
    for c in copies:
        ratio = float(c.pow(2).mean().sqrt() / x.pow(2).mean().sqrt())
        assert 10 ** (-3.5 / 20) < ratio < 10 ** (3.5 / 20)
    assert not torch.allclose(copies[0], copies[1])


def test_descend_lowers_a_penalty_and_returns_its_curve():
    wave, sites = _two_vowels(), [SimpleNamespace(start=0.45, end=0.55)]
    target = slice(int(0.46 * 16000), int(0.54 * 16000))

    def quiet_gap(waves, sites):  # a penalty that wants energy in the gap
        loss = -waves[:, target].pow(2).mean().clamp(max=1e-2).log()
        return loss, None

    edit = VoicedInsert(wave, sites)
    curve = descend(quiet_gap, edit, sites, steps=30, lr=0.1, copies=2, generator=torch.Generator().manual_seed(0))
    assert len(curve) == 30 and curve[-1] < curve[0]
    assert edit.amplitudes().mean() > torch.sigmoid(torch.tensor(-4.0))  # it learned to add a voiced source
