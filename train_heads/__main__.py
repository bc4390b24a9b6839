"""Hydra entry point: build (or reuse) pairs, extract features, train and export the heads.

``python -m train_heads experiment=default`` trains the shipped heads; ``experiment=smoke`` is a
minute-long check; ``data=manifest data.manifest=PATH`` trains on your own pairs.
"""

from __future__ import annotations

import json
import sys
import time

import hydra
from omegaconf import DictConfig

from leakloss.config import config_dir


@hydra.main(version_base="1.3", config_path=config_dir(), config_name="train_heads")
def main(cfg: DictConfig) -> None:
    from omegaconf.errors import MissingMandatoryValue

    from leakloss.acoustic.recognizer import RecognizerLoadError
    from leakloss.pairs.schema import ManifestError
    from leakloss.checks import ResumeError, SettingsError, UntrainedError
    from train_heads.pipeline import run

    start = time.time()
    try:
        result = run(cfg)
    except (ManifestError, MissingMandatoryValue, SettingsError, ResumeError, RecognizerLoadError) as err:
        # the user's data, config, recognizer or a checkpoint of another run to resume: one line, exit 2
        print(f"error: {str(err).splitlines()[0]}", file=sys.stderr)
        sys.exit(2)
    except UntrainedError as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(1)
    except KeyboardInterrupt:  # a traceback outside trainer.fit (pairs, features, setup)
        print("\ninterrupted: nothing exported (exports are whole or absent); the pairs and features cached so far "
              "are kept, and a rerun reuses them", file=sys.stderr)
        sys.exit(130)
    print(json.dumps({"export_dir": str(result["export_dir"]), "minutes": round((time.time() - start) / 60, 1)}))
    print(result["heldout_markdown"])


if __name__ == "__main__":
    from leakloss.config import exit_on_bad_overrides

    exit_on_bad_overrides("train_heads")  # a mistyped override is one error line, not Hydra's report
    main()
