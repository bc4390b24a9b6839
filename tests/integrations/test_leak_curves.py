import lightning as L
import pytest
import torch
from lightning.pytorch.loggers import CSVLogger

from integrations.leak_curves import LeakCurveCallback, ProbeSet
from leakloss.heads import RawConvHead
from leakloss.penalty import LeakPenalty
from leakloss.speech.synth import HINDI_VOICES, speak_text

TEXT = "आज नेकपा र हैन।"


class _Toy(L.LightningModule):
    """A 'TTS model' whose output is a fixed reading scaled by a learnable gain."""

    def __init__(self, wave):
        super().__init__()
        self.register_buffer("wave", wave)
        self.gain = torch.nn.Parameter(torch.ones(()))

    def training_step(self, batch, _):
        return (self.gain - 0.5) ** 2

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)

    def train_dataloader(self):
        return torch.utils.data.DataLoader(torch.zeros(8, 1), batch_size=1)


def test_callback_logs_probe_curves_to_logger_and_csv(tmp_path, tiny_rec, monkeypatch):
    from leakloss.timing import TimedSite

    # a tiny random recognizer cannot align: place the sites by hand
    monkeypatch.setattr("integrations.leak_curves.place_sites",
                        lambda w, t, r: [TimedSite(0.2, 0.3, "deletion", "ʌ->∅"), TimedSite(0.4, 0.5, "quality", "ʌi̯->ɛː")])
    penalty = LeakPenalty(tiny_rec, RawConvHead(in_channels=16, width=8))
    wave = speak_text(TEXT, HINDI_VOICES[0]).waveform
    model = _Toy(wave)
    cb = LeakCurveCallback(ProbeSet([TEXT], penalty), lambda m, texts: [m.wave * m.gain.detach()] * len(texts),
                           every=2, csv_path=tmp_path / "curves.csv")
    trainer = L.Trainer(max_epochs=1, logger=CSVLogger(tmp_path), callbacks=[cb], enable_progress_bar=False,
                        enable_checkpointing=False, accelerator="cpu")
    trainer.fit(model)
    assert [s for s, _ in cb.rows] == [2, 4, 6, 8]
    row = cb.rows[-1][1]
    assert {"leak_probe/deletion", "leak_probe/quality", "leak_probe/flagged_share", "leak_probe/contrast/ʌ->∅"} <= set(row)
    assert 0.0 <= row["leak_probe/flagged_share"] <= 1.0
    assert (tmp_path / "curves.csv").read_text().count("leak_probe/deletion") == 4
    metrics = next(tmp_path.rglob("metrics.csv")).read_text()
    assert "leak_probe/flagged_share" in metrics


def test_probe_set_reports_the_flagged_share_per_contrast_kind(monkeypatch):
    # the demo's probe-set curve: per kind, the share of the model's own sites at or above the flag threshold
    from types import SimpleNamespace

    from leakloss.timing import TimedSite

    sites = {"a": [TimedSite(0.1, 0.2, "deletion", "ʌ->∅"), TimedSite(0.3, 0.4, "deletion", "ʌ->∅"),
                   TimedSite(0.5, 0.6, "quality", "ʌi̯->ɛː")],
             "b": [TimedSite(0.1, 0.2, "deletion", "ʌ->∅"), TimedSite(0.3, 0.4, "quality", "ʌi̯->ɛː")]}
    probs = {"a": [0.9, 0.2, 0.5], "b": [0.7, 0.1]}
    active = {"a": [True, True, True], "b": [True, False]}  # b's quality site has no frames: not measured

    class FakePenalty:
        recognizer, flag_threshold = None, 0.5

        def __call__(self, waves, sites):
            key = "a" if len(sites[0]) == 3 else "b"
            return torch.zeros(()), SimpleNamespace(site_probs=torch.tensor(probs[key]),
                                                    site_active=torch.tensor(active[key]))

    monkeypatch.setattr("integrations.leak_curves.place_sites", lambda wave, text, recognizer: sites[text])
    row = ProbeSet(["a", "b"], FakePenalty()).measure([torch.zeros(100), torch.zeros(100)])
    assert row["leak_probe/flagged_share/deletion"] == 2 / 3  # 0.9 and 0.7 of 0.9, 0.2, 0.7
    assert row["leak_probe/flagged_share/quality"] == 1.0  # 0.5 is at the threshold; b's is not measured
    assert row["leak_probe/flagged_share"] == 3 / 4
    assert row["leak_probe/sites"] == 4.0
    assert (row["leak_probe/sites/deletion"], row["leak_probe/sites/quality"]) == (3.0, 1.0)
    assert abs(row["leak_probe/deletion"] - (0.9 + 0.2 + 0.7) / 3) < 1e-6


def test_a_probe_set_with_words_counts_only_those_words_sites(monkeypatch):
    from types import SimpleNamespace

    from leakloss.timing import TimedSite

    placed = [TimedSite(0.1, 0.2, "deletion", "ʌ->∅", "नेकपा"), TimedSite(0.3, 0.4, "deletion", "ʌ->∅", "घर")]
    seen = []

    class FakePenalty:
        recognizer, flag_threshold = None, 0.5

        def __call__(self, waves, sites):
            seen.append([s.word for s in sites[0]])
            n = len(sites[0])
            return torch.zeros(()), SimpleNamespace(site_probs=torch.full((n,), 0.9), site_active=torch.ones(n, dtype=bool))

    monkeypatch.setattr("integrations.leak_curves.place_sites", lambda wave, text, recognizer: list(placed))
    row = ProbeSet(["नेकपा घर"], FakePenalty(), words=["नेकपा"]).measure([torch.zeros(100)])
    assert seen == [["नेकपा"]] and row["leak_probe/sites"] == 1.0
    with pytest.raises(ValueError, match="one word per probe text"):
        ProbeSet(["a", "b"], FakePenalty(), words=["a"])


def test_the_callback_probes_each_update_once_under_accumulation(tmp_path):
    # with accumulate_grad_batches=3 three batches end at one global step: the probe set was synthesised three times
    from types import SimpleNamespace

    from integrations.leak_curves import LeakCurveCallback

    calls = []

    class Probe:
        texts = ["x"]

        def measure(self, waves):
            calls.append(1)
            return {"leak_probe/sites": 1.0}

    callback = LeakCurveCallback(Probe(), lambda module, texts: [], every=2, csv_path=tmp_path / "c.csv")
    module = torch.nn.Linear(1, 1)
    for step in (0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3, 4, 4, 4):
        callback.on_train_batch_end(SimpleNamespace(global_step=step, logger=None, is_global_zero=True), module, None,
                                    None, 0)
    assert len(calls) == 2 and [s for s, _ in callback.rows] == [2, 4]
    with pytest.raises(ValueError, match="every must be a whole number >= 1"):
        LeakCurveCallback(Probe(), lambda module, texts: [], every=0)


def test_the_callback_probes_on_rank_0_only_and_sends_no_nan_to_the_logger(tmp_path):
    # under DDP every rank appended the same rows to one CSV; a NaN share (nothing aligned) went to the logger
    import math
    from types import SimpleNamespace

    from integrations.leak_curves import LeakCurveCallback

    class Probe:
        texts = ["x"]

        def measure(self, waves):
            return {"leak_probe/sites": 0.0, "leak_probe/flagged_share": float("nan")}

    logged = []
    logger = SimpleNamespace(log_metrics=lambda row, step: logged.append((step, row)))
    callback = LeakCurveCallback(Probe(), lambda module, texts: [], every=1, csv_path=tmp_path / "c.csv")
    module = torch.nn.Linear(1, 1)
    callback.on_train_batch_end(SimpleNamespace(global_step=1, logger=logger, is_global_zero=False), module, None,
                                None, 0)
    assert callback.rows == [] and not (tmp_path / "c.csv").exists() and logged == []
    callback.on_train_batch_end(SimpleNamespace(global_step=1, logger=logger, is_global_zero=True), module, None,
                                None, 0)
    assert logged == [(1, {"leak_probe/sites": 0.0})]
    assert math.isnan(callback.rows[0][1]["leak_probe/flagged_share"])  # kept, as NaN, in the rows and the CSV
    assert "leak_probe/flagged_share,nan" in (tmp_path / "c.csv").read_text()
