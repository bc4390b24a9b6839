"""Where the shipped Hydra configs live, for entry points: package data, found with ``importlib.resources``.

The library itself never reads a config; ``python -m train_heads`` / ``train_recognizers`` /
``train_vocoder``, ``leakloss demo --retrain`` and the tests compose them from here, so a wheel install has
them too. ``compose_config("train_heads", ["experiment=smoke"])`` composes one outside ``@hydra.main``.
"""

from __future__ import annotations

from collections.abc import Sequence
from importlib import resources
from pathlib import Path

from leakloss.paths import shared_path

#: Top-level configs shipped in ``leakloss/conf`` (each an entry point's ``config_name``).
ENTRY_CONFIGS = ("train_heads", "train_recognizer", "train_whisper_recognizer", "train_vocoder", "train_f5")


def assets_path(sub: str = "") -> str:
    """Absolute path of ``leakloss/assets/SUB`` inside the installed package: the configs' ``${leakloss.assets:
    recognizers/b}``. Defaults that retrain a shipped model must name the model the library loads (a relative
    ``leakloss/assets/...`` wrote a stray tree under the cwd and left the shipped one unchanged)."""
    return str(resources.files("leakloss") / "assets" / sub)


def checkpoints_path(sub: str = "") -> str:
    """Absolute path of ``checkpoints/SUB`` beside the package (the repository's committed F5 Hindi base): the
    configs' ``${leakloss.checkpoints:f5_hindi_base}``. A relative ``checkpoints/...`` was found only from the
    repository root ("no checkpoint" anywhere else although it is committed)."""
    return str(Path(str(resources.files("leakloss"))).parent / "checkpoints" / sub)


def _register_resolvers() -> None:
    from omegaconf import OmegaConf

    OmegaConf.register_new_resolver("leakloss.shared", shared_path, replace=True)
    OmegaConf.register_new_resolver("leakloss.assets", assets_path, replace=True)
    OmegaConf.register_new_resolver("leakloss.checkpoints", checkpoints_path, replace=True)


_register_resolvers()


def config_dir() -> str:
    """Absolute path of the shipped config folder (``leakloss/conf`` inside the installed package)."""
    path = resources.files("leakloss") / "conf"
    if not path.joinpath("train_heads.yaml").is_file():
        raise FileNotFoundError(f"the shipped configs are missing from {path}: reinstall leakloss")
    return str(path)


def compose_config(config_name: str, overrides: Sequence[str] = (), return_hydra_config: bool = False):
    """Compose ``config_name`` with Hydra overrides, as ``@hydra.main`` would (no working-dir change);
    ``return_hydra_config`` also accepts ``hydra.*`` overrides (e.g. ``hydra.run.dir=...``)."""
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=config_dir(), version_base="1.3"):
        return compose(config_name=config_name, overrides=list(overrides), return_hydra_config=return_hydra_config)


def override_problem(config_name: str, overrides: Sequence[str]) -> str | None:
    """Why ``overrides`` cannot run ``config_name`` (a mistyped key or group, a bad value, ``hydra.run.dir`` that
    cannot be created), or None. Entry points check it before ``@hydra.main`` runs, so the problem is one line
    instead of Hydra's multi-line report or traceback; Hydra's own flags (``--multirun``, ``--cfg``...) are left
    to Hydra."""
    if any(arg.startswith("-") for arg in overrides):
        return None
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from leakloss.atomic import output_folder_problem
    from leakloss.checks import first_line

    try:
        cfg = compose_config(config_name, overrides, return_hydra_config=True)
    except (HydraException, OmegaConfBaseException, ValueError) as err:
        return f"{' '.join(overrides)}: {first_line(err) or type(err).__name__}"
    added = _unread_addition(cfg, overrides)
    if added is not None:
        return added
    try:  # Hydra makes its run folder before the job starts: a path under a file was its traceback
        run_dir = str(cfg.hydra.run.dir)
    except OmegaConfBaseException:  # an interpolation only Hydra's runtime resolves: Hydra reports it
        return None
    problem = output_folder_problem(run_dir)
    return None if problem is None else f"hydra.run.dir {problem}"


def _unread_addition(cfg, overrides: Sequence[str]) -> str | None:
    """A ``+key=value`` that adds a setting nothing reads (``+max_minutes=5`` where the config has no budget: it
    was accepted without a word), or None. Additions of a config group (``+experiment=x``) and of keyword
    arguments of a node Hydra instantiates (``+trainer.strategy=ddp``: its ``_target_`` takes them) are fine."""
    from omegaconf import DictConfig, OmegaConf

    choices = set(cfg.hydra.runtime.choices) if "hydra" in cfg else set()
    for arg in overrides:
        if not arg.startswith("+") or arg.startswith("++") or "=" not in arg:
            continue
        key = arg[1:].split("=", 1)[0].split("@", 1)[0]
        if key in choices or key.startswith(("hydra.", "hydra/")):
            continue
        parent_key = key.rsplit(".", 1)[0] if "." in key else ""
        parent = OmegaConf.select(cfg, parent_key) if parent_key else cfg
        if isinstance(parent, DictConfig) and "_target_" in parent:
            continue
        return (f"{arg}: '{key}' is not a setting here (a '+' addition that nothing would read); "
                "see the config's keys with --cfg job")
    return None


def exit_on_bad_overrides(config_name: str) -> None:
    """For ``if __name__ == "__main__":`` of a Hydra entry point: the command line's overrides checked by
    :func:`override_problem`; a problem is one ``error:`` line on stderr and exit 2."""
    import sys

    problem = override_problem(config_name, sys.argv[1:])
    if problem is not None:
        print(f"error: {problem}", file=sys.stderr)
        sys.exit(2)


def run_unsaved_fit(run, cfg) -> None:
    """For the ``main`` of a Hydra entry point whose fit keeps no checkpoint (minutes long): ``run(cfg)``, its
    refusals as one ``error:`` line on stderr (:class:`~leakloss.checks.SettingsError` exit 2,
    :class:`~leakloss.checks.UntrainedError` exit 1) and Ctrl-C as a line saying nothing was saved (exit 130)."""
    import sys

    from leakloss.checks import SettingsError, UntrainedError

    try:
        run(cfg)
    except (SettingsError, UntrainedError) as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2 if isinstance(err, SettingsError) else 1)
    except KeyboardInterrupt:  # no checkpoint to resume from: say so instead of a traceback
        print("error: interrupted: nothing saved (a rerun starts the fit afresh)", file=sys.stderr)
        sys.exit(130)


def instantiate_setting(node, key: str, **kwargs):
    """``hydra.utils.instantiate(node, **kwargs)``; a target that refuses its arguments (``dim=0``, a class
    that does not exist) is a :class:`leakloss.checks.SettingsError` naming ``key`` and the first line of the
    cause, not Hydra's report: entry points call it before any data is built."""
    from hydra.errors import InstantiationException
    from hydra.utils import instantiate

    from leakloss.checks import SettingsError, first_line

    try:
        return instantiate(node, **kwargs)
    except InstantiationException as err:
        cause = err.__cause__ or err
        text = first_line(cause) or first_line(err)
        if text.endswith(":"):  # "Error loading 'nope.Nope':" says why on its next line
            text = " ".join(line.strip() for line in str(cause).splitlines()[:2])
        raise SettingsError(f"{key}: {type(cause).__name__}: {text}") from None



def check_trainer(node, key: str = "trainer", **kwargs) -> None:
    """Build the Lightning trainer of ``node`` once, quietly, and drop it: a trainer this machine cannot give
    (``trainer=gpu`` without a GPU) is a :class:`leakloss.checks.SettingsError` before any data is built, not
    Hydra's report after the corpus; so is a ``gradient_clip_val`` that is not a finite number >= 0 (Lightning
    accepts NaN at build time and fails inside the first optimizer step)."""
    import logging

    from leakloss.checks import SettingsError, check_number

    quiet = [logging.getLogger(n) for n in ("lightning.pytorch.utilities.rank_zero", "lightning.fabric.utilities.rank_zero")]
    levels = [q.level for q in quiet]
    for q in quiet:
        q.setLevel(logging.ERROR)
    try:
        trainer = instantiate_setting(node, key, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                                      **kwargs)
    finally:
        for q, level in zip(quiet, levels):
            q.setLevel(level)
    from leakloss.checks import is_whole

    accumulate = getattr(trainer, "accumulate_grad_batches", 1)
    if not is_whole(accumulate, 1):  # 0 was a ZeroDivisionError inside the first epoch
        raise SettingsError(f"{key}.accumulate_grad_batches must be a whole number >= 1, got {accumulate!r}")
    clip = getattr(trainer, "gradient_clip_val", None)
    if clip is not None:
        try:
            check_number(clip, f"{key}.gradient_clip_val must be a finite number >= 0 or null", low=0.0)
        except ValueError as err:
            raise SettingsError(str(err)) from None
