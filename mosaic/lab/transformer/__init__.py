"""The transformer lab: ViTs and token encoders trained from scratch on mosaic datasets, for the
coverage study (multi-head concept classifiers) and the binding study (dual encoders).

- **classifier** (Uselis, Dittadi & Oh 2025, "Does Data Scaling Lead to Visual Compositional
  Generalization?"): an encoder and one linear head per concept, summed cross-entropy. Reported:
  accuracy per concept and joint on seen (``test_id``) and held-out (``test_ood``) combinations,
  per combination-grid cell, and the linear factorization of the pooled features.
- **binding** (Uselis, Koishigarina & Oh 2026, "How can embedding models bind concepts?", code
  ``amortization/``): a scene encoder (ViT over the image, or a token encoder over the scene
  graph's symbolic form) and a token query encoder for concept queries ``[value, EOS]`` and object
  queries ``[SOO, values, EOO, EOS]``; logits ``exp(tau) * cos``, tau learned (init 1.15, scale
  clamped at ``binding.tau_max`` in training); multi-positive soft cross-entropy over the
  in-batch queries (present concept values; present objects plus swap negatives), one term for
  concept and one for object queries. Reported: object and concept accuracy by the
  min-positive > max-negative rule on every test split (``test_ood`` = binding generalization:
  scenes of held-out object types only, candidates = every object type), and the factorization.

Both plug into the shared loop (:mod:`mosaic.lab.loop`) through :class:`ClassifierTask` and
:class:`BindingTask` (both :class:`~mosaic.lab.loop.Task`); :func:`run_transformer` runs a config
end to end into a run folder on the run driver (:mod:`mosaic.lab.run`).

Modules: :mod:`~mosaic.lab.transformer.config`, :mod:`~mosaic.lab.transformer.models` (encoders,
classifier, dual encoder), :mod:`~mosaic.lab.transformer.data` (a split in memory),
:mod:`~mosaic.lab.transformer.classifier`, :mod:`~mosaic.lab.transformer.binding` (swap negatives,
multi-positive loss, ranking metric, :func:`binding_metrics`),
:mod:`~mosaic.lab.transformer.binding_task`, :mod:`~mosaic.lab.transformer.tokens` (the scene
graph's token form), :mod:`~mosaic.lab.transformer.encoders` (ViT, token encoder),
:mod:`~mosaic.lab.transformer.factorization` (linear factorization R²) and
:mod:`~mosaic.lab.transformer.family` (the plug-in to the run driver, report tables).
"""


from mosaic.errors import MosaicError
from mosaic.lab.transformer.binding import binding_metrics
from mosaic.lab.transformer.binding_task import BindingTask
from mosaic.lab.transformer.classifier import ClassifierTask
from mosaic.lab.transformer.config import (
    BindingSection, ClassifierSection, EvaluationSection, InputSection, ModelSection, TransformerConfig,
)
from mosaic.lab.transformer.data import SplitData
from mosaic.lab.transformer.family import TransformerFamily, build_task, report_tables, run_transformer
from mosaic.lab.transformer.models import ClassifierModel, DualEncoder, load_weights, make_encoder

__all__ = [
    "TransformerConfig", "InputSection", "ModelSection", "ClassifierSection", "BindingSection", "EvaluationSection",
    "ClassifierTask", "BindingTask", "ClassifierModel", "DualEncoder", "SplitData", "binding_metrics", "build_task",
    "make_encoder", "load_weights", "run_transformer", "report_tables", "TransformerFamily", "MosaicError",
]
