"""Representation diagnostics from the literature, as pure functions on numpy / torch arrays.

Each explains *why* a model does or does not generalize to held-out combinations, from its
representations (definitions, hyper-parameters and pitfalls: ``shared/reference/diagnostics.md``;
each module's docstring cites its source code):

- ``probes`` (:mod:`.probes`): per-concept linear probes and slot-wise binding probes on frozen
  embeddings, trained on seen combinations only, scored on ``test_id`` and ``test_ood``.
- ``layers`` (:func:`.probes.layer_curve`): the same probes on every layer; seen and held-out
  accuracy per layer, the best layer against the last.
- ``factorization`` (:mod:`.factorization`): whitened R², k95, |cos| of concept means,
  per-concept probe-span R², the probe-subspace analysis, least-squares and held-out R².
- ``rank`` (:mod:`.rank`): rank axes for ordinal concepts (two-extremes and fitted), Spearman ρ
  and Kendall τ-b of the projection, seen vs held-out.
- ``binding-complexity`` (:mod:`.binding_complexity`): how complex a function of the objects'
  labels must be (MLP, product, product + sum) to predict the scene embedding; R² on seen and
  held-out object types (2-object colour/shape scenes).
- ``interventions`` (:mod:`.interventions`): replace an object's colour by arithmetic on mean
  object embeddings and check that the edit retrieves a scene of the edited pair.
- ``diffusion-classifier`` (:mod:`.diffusion_classifier`): a conditional diffusion model as a
  zero-shot classifier over every combination of the grid.

A diagnostic that does not apply raises :class:`NotApplicableError`; training a probe on
held-out combinations raises :class:`LeakageError` (both :class:`mosaic.errors.MosaicError`).

Around them: :mod:`.features` reads per-layer features of lab models with forward hooks;
:mod:`.applies` decides which apply to a run;
:mod:`.analyze` runs the diagnostics on a run (``mosaic analyze RUN``, or a config's
``analysis:`` section, :mod:`.config`); :mod:`.columns` flattens the results into sweep columns.
"""

from mosaic.diagnostics.errors import DiagnosticError, LeakageError, NotApplicableError

DIAGNOSTICS = ("probes", "layers", "factorization", "rank", "binding-complexity", "interventions", "diffusion-classifier")

__all__ = ["DIAGNOSTICS", "DiagnosticError", "LeakageError", "NotApplicableError"]
