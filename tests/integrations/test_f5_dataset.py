"""Site placement over an F5-prepared folder (Lightning predict loop), the lazy cache and the training items."""

from __future__ import annotations

import json
import pickle
import shutil
from pathlib import Path

import pytest

pytest.importorskip("f5_tts")
pytest.importorskip("datasets")

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from integrations.f5_dataset import (  # noqa: E402
    SITES_FILE,
    Prepared,
    PreparedDatasetError,
    PreparedF5Dataset,
    SiteCache,
    SiteText,
    cache_lookup,
    check_texts,
    load_audio,
    open_prepared,
    place_prepared_sites,
    site_key,
    to_16k,
)
from integrations.f5_tts import MEL_SPEC_KWARGS  # noqa: E402
from leakloss.penalty import SITE_CACHE_VERSION, place_dataset_sites, placement_id  # noqa: E402
from leakloss.text.sites import SiteFinder  # noqa: E402
from tests.conftest import needs_embedded  # noqa: E402

pytestmark = needs_embedded


@pytest.fixture(scope="module")
def rec_a():
    from leakloss.acoustic.recognizer import Recognizer

    return Recognizer.load("a")


@pytest.fixture(scope="module")
def placement(rec_a):
    return placement_id(rec_a, SiteFinder())  # the finder place_prepared_sites uses by default


@pytest.fixture()
def data(prepared_dir, tmp_path) -> Path:
    """A private copy of the prepared folder (the cache is written next to it)."""
    out = tmp_path / "data"
    shutil.copytree(prepared_dir, out)
    return out


def _items(data: Path):
    p = open_prepared(data)
    out = []
    for i in range(len(p)):
        wave, rate = load_audio(p.audio_path(i))
        out.append((to_16k(wave, rate), p.text(i)))
    return p, out


def test_batched_predict_loop_matches_place_dataset_sites_and_shares_its_format(data, rec_a, placement):
    summary = place_prepared_sites(data, rec_a, batch_size=6)
    assert summary.items == 20 and summary.placed == 20 and summary.reused == 0
    assert summary.sites > 0 and summary.with_sites > 0
    rows = [json.loads(line) for line in (data / SITES_FILE).read_text(encoding="utf-8").splitlines()]
    assert len(rows) == 20 and all(r["version"] == SITE_CACHE_VERSION for r in rows)
    assert {"audio_path", "text", "recognizer", "key", "sites", "status"} <= set(rows[0])
    assert all((r["status"] == "placed") == bool(r["sites"]) for r in rows)

    p, items = _items(data)
    reference = place_dataset_sites(items, rec_a)  # one utterance at a time, no cache
    cache = SiteCache(data / SITES_FILE)
    for (wave, text), ref in zip(items, reference):
        got = cache.sites(site_key(wave, text, placement))
        assert [(s.kind, s.contrast, s.word) for s in got] == [(s.kind, s.contrast, s.word) for s in ref]
        for a, b in zip(got, ref):  # batched (padded) recognizer pass vs one item: same alignment
            assert abs(a.start - b.start) < 1e-3 and abs(a.end - b.end) < 1e-3
    # place_dataset_sites reads this file as its own cache: nothing new to place, file untouched
    before = (data / SITES_FILE).read_bytes()
    assert place_dataset_sites(items, rec_a, cache=data / SITES_FILE) == [
        cache.sites(site_key(w, t, placement)) for w, t in items]
    assert (data / SITES_FILE).read_bytes() == before


def test_resume_places_only_what_is_missing(data, rec_a):
    place_prepared_sites(data, rec_a, batch_size=8)
    path = data / SITES_FILE
    lines = path.read_text(encoding="utf-8").splitlines()
    # an interrupted run: 12 rows merged, 3 in a rank's part file (one more torn mid-line), 5 never placed
    path.write_text("\n".join(lines[:12]) + "\n", encoding="utf-8")
    path.with_name(SITES_FILE + ".part0").write_text("\n".join(lines[12:15]) + "\n" + lines[15][:40],
                                                     encoding="utf-8")
    summary = place_prepared_sites(data, rec_a, batch_size=8)
    assert summary.placed == 5 and summary.reused == 15
    assert sorted(path.read_text(encoding="utf-8").splitlines()) == sorted(lines)
    assert not list(data.glob(SITES_FILE + ".part*"))


@pytest.mark.parametrize("damage", ["[1]", "\udcff", "not json", "bad_site", "key_not_text", "[" * 100_000,
                                    "1" * 5000])
def test_damaged_cache_lines_are_placed_again_not_a_traceback(data, rec_a, damage, capsys):
    # `[1]`: AttributeError, non-UTF-8 bytes: UnicodeDecodeError, a site without times: TypeError, mid-run
    place_prepared_sites(data, rec_a, batch_size=8)
    path = data / SITES_FILE
    lines = path.read_text(encoding="utf-8").splitlines()
    first = json.loads(lines[0])
    bad = {"bad_site": json.dumps(first | {"sites": [{"start": "x"}]}),
           "key_not_text": json.dumps(first | {"key": 5})}.get(damage, damage)
    raw = ("\n".join([bad] + lines[1:]) + "\n").encode("utf-8", errors="surrogateescape")
    path.write_bytes(raw)
    SiteCache(path)  # reads without raising
    summary = place_prepared_sites(data, rec_a, batch_size=8)
    assert summary.placed == 1 and summary.reused == len(lines) - 1
    assert sorted(path.read_text(encoding="utf-8").splitlines()) == sorted(lines)
    assert "damaged or other-version line(s) dropped" in capsys.readouterr().err


def test_cache_is_read_lazily_and_unknown_keys_cost_nothing(data, rec_a):
    place_prepared_sites(data, rec_a)
    cache = SiteCache(data / SITES_FILE)
    assert all(isinstance(v, int) for v in cache.offsets.values())  # only offsets in memory
    assert cache.sites("0" * 64) == [] and cache.sites(None) == []
    lookup = cache_lookup(cache)
    assert lookup("plain text, no key") == []


def test_training_items_carry_their_key_through_pickle_and_f5_collate(data, rec_a, placement):
    from f5_tts.model.dataset import collate_fn

    place_prepared_sites(data, rec_a)
    p = open_prepared(data)
    ds = PreparedF5Dataset(p, placement, MEL_SPEC_KWARGS)
    cache = SiteCache(data / SITES_FILE)
    keyed = [i for i in range(len(p)) if cache.sites(ds[i]["text"].site_key)]
    assert keyed, "some items have sites"
    item = ds[keyed[0]]
    assert isinstance(item["text"], SiteText) and item["mel_spec"].shape[0] == 100
    frames = item["mel_spec"].shape[-1]
    assert abs(frames - ds.get_frame_len(keyed[0])) <= 2  # duration.json agrees with the mel
    clone = pickle.loads(pickle.dumps(item["text"]))  # DataLoader workers
    assert clone == item["text"] and clone.site_key == item["text"].site_key
    batch = collate_fn([ds[i] for i in keyed[:3]])
    assert [t.site_key for t in batch["text"]] == [ds[i]["text"].site_key for i in keyed[:3]]
    assert cache_lookup(cache)(batch["text"][0]) == cache.sites(item["text"].site_key)


def test_missing_arrow_files_are_named(tmp_path):
    (tmp_path / "duration.json").write_text('{"duration": []}')
    with pytest.raises(PreparedDatasetError, match="raw.arrow"):
        open_prepared(tmp_path)
    with pytest.raises(PreparedDatasetError, match="not a folder"):
        open_prepared(tmp_path / "nope")


def _fake(texts: list[str]) -> Prepared:
    return Prepared(Path("."), [{"audio_path": "", "text": list(t), "duration": 1.0} for t in texts],
                    [1.0] * len(texts))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.text(alphabet=st.characters(blacklist_categories=("Cs",), max_codepoint=0x08FF), max_size=12),
                min_size=1, max_size=4))
def test_texts_without_devanagari_are_refused(texts):
    vocab = {c: i for i, c in enumerate(sorted({c for t in texts for c in t} | {" "}))}
    with pytest.raises(PreparedDatasetError, match="no Devanagari"):
        check_texts(_fake(["घर", *texts]), vocab)


def test_characters_outside_the_vocab_are_refused():
    check_texts(_fake(["घर"]), {"घ": 0, "र": 1})
    with pytest.raises(PreparedDatasetError, match="not in the vocab"):
        check_texts(_fake(["घर जा"]), {"घ": 0, "र": 1, " ": 2})


def test_cached_sites_outside_their_clip_are_ignored_and_named(data, capsys):
    # a cached site at 1e9 s (a damaged or foreign leak_sites.jsonl) was counted and trained on
    from integrations.f5_dataset import summarize

    prepared = open_prepared(data)
    placement = "test-placement"
    wave, rate = load_audio(prepared.audio_path(0))
    key = site_key(to_16k(wave, rate), prepared.text(0), placement)
    inside = {"start": 0.1, "end": 0.2, "kind": "deletion", "contrast": "ʌ->∅", "word": "w"}
    far = inside | {"start": 1e9, "end": 1e9 + 0.1}
    (data / SITES_FILE).write_text(json.dumps({"version": SITE_CACHE_VERSION, "key": key, "sites": [inside, far]})
                                   + "\n", encoding="utf-8")
    summary = summarize(prepared, data / SITES_FILE, placement)
    assert summary.sites == 1 and summary.with_sites == 1
    assert "1 cached site(s) lie outside their clip and are ignored: clip_000.wav (1e+09-1e+09 s of" \
        in capsys.readouterr().err
    item = PreparedF5Dataset(prepared, placement, MEL_SPEC_KWARGS)[0]  # the training lookup leaves it out too
    assert [s.start for s in cache_lookup(SiteCache(data / SITES_FILE))(item["text"])] == [0.1]


def test_items_that_could_not_be_placed_are_counted_and_said(data, capsys):
    # the predict loop stored a failed alignment as [] sites: the summary counted it as an item without sites
    from integrations.f5_dataset import summarize

    prepared = open_prepared(data)
    placement = "test-placement"
    rows = []
    for i, status in enumerate(["alignment_failed", "placed", "no_testable_site", "too_short", None]):
        wave, rate = load_audio(prepared.audio_path(i))
        site = {"start": 0.1, "end": 0.2, "kind": "deletion", "contrast": "ʌ->∅", "word": "w"}
        row = {"version": SITE_CACHE_VERSION, "key": site_key(to_16k(wave, rate), prepared.text(i), placement),
               "sites": [site] if status == "placed" else []}
        rows.append(json.dumps(row | ({"status": status} if status else {})))  # None: a row written before the field
    (data / SITES_FILE).write_text("\n".join(rows) + "\n", encoding="utf-8")
    summary = summarize(prepared, data / SITES_FILE, placement)
    assert summary.not_placed == {"alignment_failed": 1, "too_short": 1} and summary.with_sites == 1
    assert (f"warning: 2 of {len(prepared)} items could not be placed and get no sites (alignment_failed: 1, "
            "too_short: 1)") in capsys.readouterr().err


def test_ctrl_c_and_sigterm_during_a_lightning_call_reach_the_caller_as_keyboard_interrupts():
    # Lightning turned Ctrl-C into sys.exit(1) (exit 1 is a diverged run here) and left SIGINT ignored, and a SIGTERM
    # was only logged: the placement went on, and training after it
    import signal

    import lightning as L
    from lightning.pytorch.trainer.states import TrainerStatus

    from integrations.f5_dataset import run_interruptibly

    trainer = L.Trainer(accelerator="cpu", devices=1, logger=False, enable_progress_bar=False,
                        enable_model_summary=False)
    before = signal.getsignal(signal.SIGINT)

    def ctrl_c():
        trainer.state.status = TrainerStatus.INTERRUPTED
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # as Lightning leaves it
        raise SystemExit(1)

    with pytest.raises(KeyboardInterrupt):
        run_interruptibly(trainer, ctrl_c)
    assert signal.getsignal(signal.SIGINT) is before
    trainer.state.status = TrainerStatus.FINISHED
    trainer._signal_connector.received_sigterm = True  # as its SIGTERM handler sets it
    with pytest.raises(KeyboardInterrupt, match="SIGTERM"):
        run_interruptibly(trainer, lambda: None)
    trainer._signal_connector.received_sigterm = False
    assert run_interruptibly(trainer, lambda: 7) == 7


@pytest.mark.parametrize("duration, message", [
    ('{"duration": 5}', "'duration' is a int, not a list"),
    ('{"duration": {"a": 1}}', "'duration' is a dict, not a list"),
    ("[" * 100_000, "nested too deeply"),
])
def test_a_malformed_duration_json_is_a_prepared_dataset_error(data, duration, message):
    # {"duration": 5} was a TypeError from len(), a dict a KeyError, deep nesting a RecursionError: tracebacks
    (data / "duration.json").write_text(duration, encoding="utf-8")
    with pytest.raises(PreparedDatasetError, match=message):
        open_prepared(data)


def test_a_duration_too_large_for_a_float_is_named(data):
    rows = json.loads((data / "duration.json").read_text(encoding="utf-8"))["duration"]
    rows[1] = 10 ** 400  # an OverflowError in math.isfinite
    (data / "duration.json").write_text(json.dumps({"duration": rows}), encoding="utf-8")
    with pytest.raises(PreparedDatasetError, match=r"1 of 20 durations are not finite numbers of seconds >= 0: entry 1"):
        open_prepared(data)


def test_a_vocab_with_a_repeated_token_is_refused(tmp_path):
    # collapsed, "c" got id 4 of a 4-entry vocab: an embedding index out of range mid-training, renumbered on export
    from integrations.f5_dataset import read_vocab

    (tmp_path / "vocab.txt").write_text(" \na\nb\na\nc\n", encoding="utf-8")
    with pytest.raises(PreparedDatasetError, match=r"token 'a' is on lines 2 and 4"):
        read_vocab(tmp_path / "vocab.txt")
    (tmp_path / "vocab.txt").write_text(" \na\nb\n", encoding="utf-8")
    assert read_vocab(tmp_path / "vocab.txt") == {" ": 0, "a": 1, "b": 2}


def test_a_text_the_frontend_rejects_is_placed_as_bad_text():
    # a word over 100 characters raised TextTooLongError mid-placement: a traceback
    import torch

    from integrations.f5_dataset import placement_from_log_probs

    placed = placement_from_log_probs(torch.zeros(5, 3), 5, "नेकपा " + "क" * 101, None, SiteFinder())
    assert placed.status == "bad_text" and placed.sites == []


def test_empty_and_silent_clips_get_the_statuses_locate_sites_gives(rec_a):
    # an empty 24 kHz clip was a reshape error in the resampler; silence and emptiness were "alignment_failed"
    import torch

    from integrations.f5_dataset import SitePlacer, _collate_placement
    from leakloss.penalty import locate_sites

    assert to_16k(torch.zeros(0), 24_000).numel() == 0
    text = "आज नेकपा र अरू दलका प्रतिनिधि बैठकमा आए।"
    quiet = torch.randn(16_000) * 1e-5
    cases = [(torch.zeros(0), text, "too_short"), (quiet, text, "silent"),  # the text first, as locate_sites
             (quiet, "OK 123", "no_testable_site"), (torch.zeros(0), "नेकपा " + "क" * 101, "bad_text")]
    items = [{"index": i, "audio_path": f"{i}.wav", "text": t, "key": str(i), "wave": w}
             for i, (w, t, _) in enumerate(cases)]
    rows = SitePlacer(rec_a).predict_step(_collate_placement(items))
    assert [r["status"] for r in rows] == [want for *_, want in cases]
    assert [locate_sites(w, t, rec_a).status for w, t, _ in cases[:3]] == ["too_short", "silent", "no_testable_site"]
