"""The training lab: one Accelerate training loop shared by every model family.

- :mod:`mosaic.lab.config` — pydantic sections shared by lab configs (dataset, training, EMA) and
  YAML loading with ``--set key.path=value`` overrides.
- :mod:`mosaic.lab.data` — datasets named by path or generated on demand from a spec, held in
  memory as uint8, and the deterministic per-step batch plan.
- :mod:`mosaic.lab.loop` — the generic loop (:class:`~mosaic.lab.loop.Task` interface, run
  folders, checkpoints with exact resume, EMA, logs, NaN stop, checkpoint selection on ``val``).
- :mod:`mosaic.lab.conditioning` — factorized, caption and per-combination (baseline) conditions.
- :mod:`mosaic.lab.diffusion` — conditional pixel-space diffusion (UNet / DiT backbones from
  diffusers), sampling with classifier-free guidance, scoring with the evaluator.
- :mod:`mosaic.lab.transformer` — ViTs and token encoders from scratch: multi-head concept
  classifiers (coverage study) and dual encoders (binding study), with :mod:`mosaic.lab.tokens`
  (the scene graph's token form), :mod:`mosaic.lab.encoders`, :mod:`mosaic.lab.binding` (swap
  negatives, multi-positive loss, ranking metric) and :mod:`mosaic.lab.factorization` (R²).
- :mod:`mosaic.lab.cli` — ``mosaic train diffusion``, ``mosaic train transformer`` and ``mosaic sample``.
"""
