"""Command-line entry point: ``python -m eval.run [overrides]`` (Hydra).

Examples (see configs/ and the README)::

    python -m eval.run dataset=gsm8k method=rheo method.m=1 limit=5
    python -m eval.run -m method=rheo method.m=0,1,2,3 temperature=0,0.5,1.0 seed=0,1,2 dataset=gsm8k
    python -m eval.run -m experiment=main_table model=llama31_8b_instruct device=cuda dtype=bfloat16

The work is done by :func:`eval.runner.run`, a plain function of the composed
config; this module only wires it to Hydra.
"""

from __future__ import annotations

import logging

import hydra
from omegaconf import DictConfig

from eval.runner import run
from eval.schema import register_configs

register_configs()
log = logging.getLogger("eval.run")


@hydra.main(version_base="1.3", config_path="../configs", config_name="config")
def main(cfg: DictConfig) -> None:
    summary = run(cfg)
    log.info("computed %d, skipped %d, failed %d rows; config hashes %s", summary.computed,
             summary.skipped, summary.failed, summary.config_hashes)


if __name__ == "__main__":
    main()
