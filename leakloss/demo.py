"""``leakloss demo``: the whole idea on the embedded default, offline, in minutes on a 2-core CPU.

Stages (each cached by content hash under ``--out``; a rerun reuses them):

1. heads: the shipped heads (or ``--retrain``: ``train_heads`` on the embedded pairs) and their
   held-out table;
2. readings: held-out sentences read by the Nepali teacher and the Hindi base (held-out voices), with
   two teacher references in other voices;
3. scoring: every reading scored word by word; an HTML report per reading you can listen to;
4. comparison: flagged key words per system with 95% intervals (the seed's form), chart;
5. fine-tune: the committed Hindi-base F5 (``checkpoints/f5_hindi_base``) fine-tuned on Nepali teacher readings
   through F5's own Trainer with and without the leak penalty; the leak curves of both runs, and the probe set's
   (unseen test-word phrases said by the model being trained: the share of their sites flagged, per contrast
   kind), in W&B (offline) + CSV + PNG;
6. ``index.html`` linking everything.
"""

from __future__ import annotations

import functools
import hashlib
import io
import json
import time
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from leakloss.atomic import write_bytes_atomic, write_text_atomic
from leakloss.audio import save_audio
from leakloss.constants import SAMPLE_RATE

console = Console()


@dataclass
class DemoConfig:
    out: Path = Path("leakloss_out")
    retrain: bool = False
    sentences: int = 16
    f5_steps: int = 200
    f5_items: int = 24
    f5_probe_words: int = 8  # unseen test-word phrases the fine-tuned model says at each probe
    progress: bool = True

    def __post_init__(self) -> None:
        for name in ("sentences", "f5_steps", "f5_items", "f5_probe_words"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a whole number >= 1, got {value!r}")


#: The fine-tune stage: the committed Hindi-base F5 (``checkpoints/``) and the penalty's weight (times t**2, as
#: LeakAwareCFM weighs it): 10x the fine-tune experiment's 0.1, with no warm-up, so that in a demo's 200 updates the
#: curves can move (the experiment guards intelligibility: train_f5.effect).
F5_BASE = "f5_hindi_base"
F5_LEAK_WEIGHT = 1.0

#: The demo's two systems: the folder of their results and reports -> the name a reader sees (tables, plot, titles).
SYSTEM_NAMES = {"teacher": "teacher", "hindi_base": "Hindi base"}


def _stamp(path: Path, key: str) -> bool:
    f = path / ".stamp"
    return f.exists() and f.read_text() == key


def _set_stamp(path: Path, key: str) -> None:
    path.mkdir(parents=True, exist_ok=True)
    write_text_atomic(path / ".stamp", key)


def _clear_stage(folder: Path, entries: tuple[str, ...]) -> None:
    """Remove the ``entries`` an earlier run of a stage wrote into ``folder`` (the demo's own outputs only)."""
    import shutil

    for name in entries:
        path = folder / name
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        elif path.exists() or path.is_symlink():
            path.unlink()


def _hash(*parts) -> str:
    return hashlib.sha256(json.dumps(parts, ensure_ascii=False, default=str).encode()).hexdigest()[:16]


def _file_hash(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16] if path.exists() else "absent"


def _smooth(points: list[tuple[int, float]], window: int = 10) -> list[tuple[int, float]]:
    """Running mean: each logged value is one batch at one random flow time t."""
    out = []
    for i, (step, _) in enumerate(points):
        chunk = [v for _, v in points[max(0, i - window + 1): i + 1]]
        out.append((step, sum(chunk) / len(chunk)))
    return out


def _heads(cfg: DemoConfig) -> tuple[Path, list[dict]]:
    from leakloss.heads import load_head
    from leakloss.scorer import SHIPPED_HEADS

    if not cfg.retrain:
        console.print(f"[bold]1. heads[/]: using the shipped heads in {SHIPPED_HEADS} (--retrain to train them here)")
        return SHIPPED_HEADS, load_head(SHIPPED_HEADS / "deletion.safetensors")[1].heldout
    from leakloss.config import compose_config
    from train_heads.pipeline import run

    export = cfg.out / "heads"
    hcfg = compose_config("train_heads", [
        "experiment=default", f"export_dir={export}", f"out_dir={cfg.out / 'train_heads'}", "logger=csv",
        f"progress={str(cfg.progress).lower()}"])
    console.print("[bold]1. heads[/]: retraining on the embedded pairs (cached pairs and features are reused)")
    return export, run(hcfg)["heldout"]


def _key_words() -> dict[str, str]:
    from importlib import resources

    from leakloss.speech.corpus import builtin_sentences

    sentences = builtin_sentences()
    text = resources.files("leakloss.data").joinpath("key_words_ne.tsv").read_text(encoding="utf-8")
    out = {}
    for line in text.splitlines():
        parts = line.split("\t")
        if len(parts) >= 2 and parts[0].isdigit() and 0 < int(parts[0]) <= len(sentences):
            out[sentences[int(parts[0]) - 1]] = parts[1]
    return out


@functools.lru_cache(maxsize=1)
def _usable_sentences() -> list[str]:
    """The held-out sentences with a testable site, in order (finding the sites takes seconds: found once)."""
    from leakloss.speech.corpus import builtin_sentences, split_sentences
    from leakloss.text.sites import SiteFinder

    _, held = split_sentences(builtin_sentences())
    finder = SiteFinder()
    return [s for s in held if any(w.testable_sites for w in finder(s))]


def demo_sentences(requested: int) -> tuple[list[str], str | None]:
    """The first ``requested`` held-out sentences with a testable site, and a warning when fewer exist than were
    asked for (``--sentences 100000`` used 52 without a word), else None."""
    usable = _usable_sentences()
    capped = None
    if requested > len(usable):
        capped = (f"--sentences {requested} asked for more sentences than the demo has: "
                  f"{len(usable)} held-out sentences with a testable site are used")
    return list(usable[:requested]), capped


def _readings(cfg: DemoConfig, chosen: list[str]) -> list[dict]:
    from leakloss.speech.references import teacher_reading
    from leakloss.speech.synth import HELDOUT_HINDI_VOICE, HELDOUT_TEACHER_VOICE, TRAIN_TEACHER_VOICES, speak_text
    from leakloss.text.sites import SiteFinder

    finder = SiteFinder()
    folder = cfg.out / "readings"
    key = _hash("readings-v1", chosen)
    manifest = folder / "readings.json"
    if _stamp(folder, key) and manifest.exists():
        return json.loads(manifest.read_text(encoding="utf-8"))
    console.print(f"[bold]2. readings[/]: {len(chosen)} held-out sentences, teacher and Hindi base, 2 references each")
    items = []
    for i, text in enumerate(chosen):
        sid = f"s{i:02d}"
        paths = {}
        for name, reading in (("teacher", teacher_reading(text, HELDOUT_TEACHER_VOICE, finder)),
                              ("hindi", speak_text(text, HELDOUT_HINDI_VOICE)),
                              ("ref1", teacher_reading(text, TRAIN_TEACHER_VOICES[i % 5], finder)),
                              ("ref2", teacher_reading(text, TRAIN_TEACHER_VOICES[(i + 2) % 5], finder))):
            paths[name] = str(folder / f"{sid}-{name}.wav")
            folder.mkdir(parents=True, exist_ok=True)
            save_audio(paths[name], reading.waveform)
        items.append({"sentence_id": sid, "text": text, **paths})
    write_text_atomic(manifest, json.dumps(items, ensure_ascii=False, indent=1))
    _set_stamp(folder, key)
    return items


def _score(cfg: DemoConfig, heads_dir: Path, items: list[dict]) -> dict[str, Path]:
    from leakloss.audio import load_audio
    from leakloss.report import render_report, write_report
    from leakloss.scorer import Scorer

    dirs = {"teacher": cfg.out / "results" / "teacher", "hindi_base": cfg.out / "results" / "hindi_base"}
    from leakloss.acoustic.recognizer import EMBEDDED_DIR

    # the recognizers' weights and the word check's calibrated limits decide results as much as the heads
    recognizers = [hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(EMBEDDED_DIR.glob("*/*.safetensors"))]
    limits = [p.read_text(encoding="utf-8") for p in sorted(EMBEDDED_DIR.glob("*/card.json"))]
    key = _hash("score-v4", items,  # 4: readings heard at one level
                sorted(p.name for p in heads_dir.glob("*.json")),
                [hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(heads_dir.glob("*.safetensors"))],
                recognizers, limits)
    if all(_stamp(d, key) for d in dirs.values()):
        return dirs
    console.print("[bold]3. scoring[/]: every reading against its two references")
    scorer = Scorer(heads_dir=heads_dir)
    keys = _key_words()
    for d in dirs.values():
        d.mkdir(parents=True, exist_ok=True)
    for system in dirs:
        (cfg.out / "reports" / system).mkdir(parents=True, exist_ok=True)
    for system, role in (("teacher", "teacher"), ("hindi_base", "hindi")):
        for item in items:
            result = scorer.score(item[role], item["text"], [item["ref1"], item["ref2"]])
            result["system"], result["sentence_id"] = SYSTEM_NAMES[system], item["sentence_id"]
            key_word = keys.get(item["text"])
            for w in result["words"]:
                w["key"] = key_word is not None and w["word"] == key_word
            if key_word is None or not any(w["key"] and w["sites"] for w in result["words"]):
                for w in result["words"]:  # no listed key word with a site: every tested word counts
                    w.pop("key", None)
            write_text_atomic(dirs[system] / f"{item['sentence_id']}.json", json.dumps(result, ensure_ascii=False, indent=1))
            html = render_report(result, load_audio(item[role])[0], title=f"{SYSTEM_NAMES[system]} · {item['sentence_id']}")
            write_report(cfg.out / "reports" / system / f"{item['sentence_id']}.html", html)
    for d in dirs.values():
        _set_stamp(d, key)
    return dirs


def _compare(cfg: DemoConfig, dirs: dict[str, Path], items: list[dict]) -> dict:
    from leakloss.eval.compare import compare_results, write_comparison

    # this run's readings only: a rerun with fewer --sentences had counted the earlier run's results too
    files = {SYSTEM_NAMES[folder]: [path / f"{item['sentence_id']}.json" for item in items]
             for folder, path in dirs.items()}
    result = compare_results({SYSTEM_NAMES[folder]: path for folder, path in dirs.items()}, files=files)
    write_comparison(result, cfg.out / "comparison")
    console.print("[bold]4. comparison[/] (key words flagged, scored readings)")
    console.print((cfg.out / "comparison" / "comparison.md").read_text(encoding="utf-8"))
    return result


def finetune_texts(n: int) -> list[str]:
    """The fine-tune stage's ``n`` texts: phrases of 2-3 words of the built-in sentences (the base was pretrained on
    phrases of 1-4 words), none with a test word (:func:`train_f5.data.phrases` drops those)."""
    from leakloss.speech.corpus import builtin_sentences
    from train_f5.data import phrases

    return [t for t in phrases(builtin_sentences(), max_words=3) if len(t.split()) >= 2][:n]


def probe_words(n: int) -> list:
    """The probe set: ``n`` test words (never in any fine-tune or pretraining text), each said in a phrase of its
    sentence; only the test word's own sites count (:class:`integrations.leak_curves.ProbeSet` ``words``)."""
    from leakloss.speech.corpus import builtin_sentences
    from train_f5.effect import held_out_words

    return held_out_words(n, builtin_sentences())


def _finetune(cfg: DemoConfig) -> Path | None:
    try:
        import f5_tts  # noqa: F401
    except ImportError:
        console.print("[yellow]5. fine-tune skipped: the f5 extra is not installed (make setup installs it)[/]")
        return None
    from integrations.f5_tts import f5_probe, final_leak, penalty_comparison, read_leak_curve
    from integrations.leak_curves import ProbeSet
    from leakloss.config import checkpoints_path
    from leakloss.heads import SHIPPED_HEADS
    from leakloss.penalty import LeakPenalty
    from leakloss.site_placement import place_dataset_sites
    from leakloss.speech.corpus import teacher_reading
    from leakloss.speech.synth import TRAIN_TEACHER_VOICES
    from leakloss.vocoder import EMBEDDED_VOCODER, MelToWave
    from train_f5.effect import EffectSettings, base_factory
    from train_f5.evaluate import CFG_STRENGTH, NFE, SWAY_SAMPLING

    base_dir = Path(checkpoints_path(F5_BASE))
    if not (base_dir / "model.safetensors").is_file():  # the base sits beside the package, not in it
        console.print(f"[yellow]5. fine-tune skipped: no Hindi-base F5 at {base_dir} (a clone of the repository has "
                      "it; python -m train_f5 trains one)[/]")
        return None
    folder = cfg.out / "finetune"
    learning_rate = EffectSettings.lr  # the fine-tune experiment's
    key = _hash("finetune-v3", cfg.f5_steps, cfg.f5_items, cfg.f5_probe_words, F5_LEAK_WEIGHT, learning_rate,
                NFE, CFG_STRENGTH, SWAY_SAMPLING, _file_hash(EMBEDDED_VOCODER.with_suffix(".safetensors")),
                _file_hash(base_dir / "model.safetensors"), _file_hash(SHIPPED_HEADS / "rawconv.safetensors"))
    if _stamp(folder, key) and (folder / "leak_curves.png").exists():
        return folder / "leak_curves.png"
    # another key (--f5-steps, --f5-items, base, vocoder, head, ...): F5 would resume the old runs' checkpoints in
    # the same folders (trained nothing, or logged their updates as new steps): the stage starts afresh
    _clear_stage(folder, ("with_penalty", "without_penalty", "leak_sites.jsonl", "leak_curves.png", ".stamp"))
    make_model, card = base_factory(base_dir)
    console.print(f"[bold]5. fine-tune[/]: the Hindi-base F5 ({base_dir.name}, {card.get('steps')} pretraining "
                  f"updates) on Nepali teacher readings, {cfg.f5_steps} steps with and without the penalty, through "
                  "F5's own Trainer (W&B offline)")
    penalty = LeakPenalty.load(mel_to_wave=MelToWave.embedded())
    texts = finetune_texts(cfg.f5_items)
    items = [(teacher_reading(text, TRAIN_TEACHER_VOICES[i % len(TRAIN_TEACHER_VOICES)]).waveform, SAMPLE_RATE, text)
             for i, text in enumerate(texts)]
    sites = place_dataset_sites([(w, t) for w, _, t in items], penalty.recognizer, folder / "leak_sites.jsonl")
    probe_set = probe_words(cfg.f5_probe_words)
    probe = f5_probe(ProbeSet([w.phrase for w in probe_set], penalty, words=[w.word for w in probe_set]),
                     items[0][0], items[0][2], penalty.mel_to_wave, nfe=NFE, cfg_strength=CFG_STRENGTH,
                     sway_sampling_coef=SWAY_SAMPLING)
    runs = penalty_comparison(items, sites, folder, leak_penalty=penalty, mel_to_wave=penalty.mel_to_wave,
                              steps=cfg.f5_steps, probe=probe, probe_every=max(1, cfg.f5_steps // 4),
                              make_model=make_model, leak_weight=F5_LEAK_WEIGHT, learning_rate=learning_rate)
    for name, run in runs.items():
        shares = read_leak_curve(run.leak_csv, "leak_probe/flagged_share")
        console.print(f"   {name.replace('_', ' ')}: leak penalty over the last quarter {final_leak(run.leak_csv):.3f}; "
                      f"probe set ({len(probe_set)} unseen test words): flagged share "
                      + " -> ".join("n/a" if v != v else f"{v:.2f}" for _, v in shares))
    png = _plot_curves({name: run.leak_csv for name, run in runs.items()}, folder / "leak_curves.png")
    _set_stamp(folder, key)
    return png


def _plot_curves(runs: dict[str, Path], out: Path) -> Path:
    """Per contrast kind: the leak probability at the training batches' sites (top, running mean) and the share of
    the probe set's sites flagged in the model's own syntheses (bottom, one point per probe, n = its sites)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from integrations.f5_tts import read_leak_curve

    fig, axes = plt.subplots(2, 2, figsize=(10, 6.6))
    kinds = (("deletion", "schwa deletion (ʌ->∅)"), ("quality", "vowel quality"))
    for name, path in runs.items():
        label = name.replace("_", " ")
        for col, (kind, _) in enumerate(kinds):
            pts = _smooth(read_leak_curve(path, f"leak/per_kind/{kind}"))
            if pts:
                axes[0, col].plot([s for s, _ in pts], [v for _, v in pts], label=label)
            probe = [(s, v) for s, v in read_leak_curve(path, f"leak_probe/flagged_share/{kind}") if v == v]
            if probe:
                line, = axes[1, col].plot([s for s, _ in probe], [v for _, v in probe], marker="o", label=label)
                for step, n in read_leak_curve(path, f"leak_probe/sites/{kind}"):  # few sites: a share says little
                    share = dict(probe).get(step)
                    if share is not None:
                        axes[1, col].annotate(f"n={n:.0f}", (step, share), textcoords="offset points", xytext=(4, 4),
                                              fontsize=7, color=line.get_color())
    for col, (_, title) in enumerate(kinds):
        axes[0, col].set_title(f"leak probability at {title} sites (training batches)", fontsize=9)
        axes[1, col].set_title(f"probe set: share of {title} sites flagged (own syntheses)", fontsize=9)
        axes[1, col].set_ylim(-0.05, 1.05)
        for row in range(2):
            axes[row, col].set_xlabel("F5 update")
            if axes[row, col].lines:
                axes[row, col].legend()
            else:
                axes[row, col].text(0.5, 0.5, "no site measured", ha="center", va="center",
                                    transform=axes[row, col].transAxes, color="gray")
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    png = io.BytesIO()
    fig.savefig(png, format="png", dpi=110)
    plt.close(fig)
    write_bytes_atomic(out, png.getvalue())  # never through a symlink at its name, never half-written
    return out


def _index(cfg: DemoConfig, heldout: list[dict], comparison: dict, curves: Path | None, items: list[dict],
           notes: list[str] = ()) -> Path:
    from leakloss.evaluate import write_index
    from leakloss.schema import SHORT_VOWEL
    from train_heads.evaluate import heldout_label

    notes_shown = [{"kind": "text", "title": "Note", "text": note} for note in notes]
    heads = [{"kind": "table", "title": "Held-out table (heads)", "columns": ["head", "pair kind", "caught", "false flags"],
              "rows": [[r["head"], heldout_label(r), "—" if r["pair_kind"] == SHORT_VOWEL else f"{r['caught']} / {r['total']}",
                        f"{r['false_flags']} / {r['shams']}"] for r in heldout]}]
    fine_tune = [] if curves is None else [
        {"kind": "image", "title": "Leak curves of the Hindi-base F5 fine-tune", "src": "finetune/leak_curves.png"}]
    links = [{"href": f"reports/{system}/{item['sentence_id']}.html",
              "text": f"{SYSTEM_NAMES[system]} · {item['sentence_id']} · {item['text']}"}
             for system in ("hindi_base", "teacher") for item in items]
    return write_index(cfg.out, comparison, links, title="leakloss demo", before=notes_shown + heads, after=fine_tune,
                       intro="Synthetic readings by the espeak Nepali teacher and the espeak Hindi base, scored word by "
                             "word against trusted teacher references. A flag is a candidate for a listener, not a verdict.")


def run_demo(cfg: DemoConfig) -> dict:
    start = time.time()
    cfg.out.mkdir(parents=True, exist_ok=True)
    heads_dir, heldout = _heads(cfg)
    from train_heads.evaluate import heldout_markdown

    console.print(heldout_markdown(heldout))
    chosen, capped = demo_sentences(cfg.sentences)
    warnings = [capped] if capped else []
    for w in warnings:
        console.print(f"[yellow]warning:[/] {escape(w)}", soft_wrap=True)
    items = _readings(cfg, chosen)
    dirs = _score(cfg, heads_dir, items)
    comparison = _compare(cfg, dirs, items)
    curves = _finetune(cfg)
    index = _index(cfg, heldout, comparison, curves, items, warnings)
    minutes = (time.time() - start) / 60
    console.print(f"[bold green]done in {minutes:.1f} min[/]: open {index}")
    for what, where in (("held-out table", heads_dir / "heldout.md"), ("comparison", cfg.out / "comparison"),
                        ("word reports", cfg.out / "reports"), ("leak curves", curves), ("index", index)):
        console.print(f"  {what:15s} {where}")
    for w in warnings:  # said again in the summary: the first one scrolled away during the run
        console.print(f"[yellow]warning:[/] {escape(w)}", soft_wrap=True)
    return {"index": index, "comparison": comparison, "minutes": minutes, "warnings": warnings}
