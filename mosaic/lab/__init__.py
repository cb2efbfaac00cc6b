"""The training lab: one run driver and one Accelerate training loop shared by every model family.

- :mod:`mosaic.lab.config` — pydantic sections shared by lab configs (dataset, training, EMA) and
  YAML loading with ``--set key.path=value`` overrides.
- :mod:`mosaic.lab.data` — datasets named by path or generated on demand from a spec, held in
  memory as uint8, and the deterministic per-step batch plan.
- :mod:`mosaic.lab.loop` — the generic loop (:class:`~mosaic.lab.loop.Task` interface,
  checkpoints with exact resume, EMA, logs, NaN stop, checkpoint selection on ``val``).
- :mod:`mosaic.lab.run_folder` — run folders (:class:`~mosaic.lab.run_folder.RunFolder`: the
  files, opening a new run or a resume with its config and dataset checks, the run's id, logs).
- :mod:`mosaic.lab.run` — the one run driver (done-check, accelerator, dataset, seeding, task, run
  folder, training, results, ``metrics.json``, ``DONE``); a family plugs in with a
  :class:`~mosaic.lab.run.Family`.
- :mod:`mosaic.lab.diffusion` — conditional pixel-space diffusion (UNet / DiT backbones from
  diffusers), its conditioners (factorized, caption, per-combination baseline), sampling with
  classifier-free guidance, scoring with the evaluator.
- :mod:`mosaic.lab.transformer` — ViTs and token encoders from scratch: multi-head concept
  classifiers (coverage study) and dual encoders (binding study), with the scene graph's token
  form, the encoders, binding's swap negatives / loss / ranking metric and the factorization R².

The seen / held-out table every family reports is :mod:`mosaic.evaluation.table`. The commands
(``mosaic train ...``, ``mosaic sample``) are in :mod:`mosaic.cli`.
"""
