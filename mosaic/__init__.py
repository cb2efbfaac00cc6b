"""mosaic: controlled synthetic datasets and a training lab for compositional generalization.

Data flows spec.yaml -> :class:`mosaic.spec.Spec` -> :mod:`mosaic.sampling` -> scene graph ->
:mod:`renderers` -> images, and ``labels(scene)`` (:mod:`mosaic.labels`) -> metadata.
"""

__version__ = "0.1.0"
