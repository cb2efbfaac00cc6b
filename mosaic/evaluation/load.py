"""Which evaluator: ``"parser"`` (the scene parser) or a directory made by ``mosaic evaluator train``."""

from __future__ import annotations

from pathlib import Path

from mosaic.errors import MosaicError
from mosaic.evaluation.check import Evaluator
from mosaic.spec import Spec


def load_evaluator(spec: Spec, which: str | Path = "parser", device: str = "cpu", abstain: bool = True,
                   position_bins: str = "strict", workers: int = 1) -> Evaluator:
    """The scene parser (``"parser"``) or a trained learned evaluator (a directory).

    ``abstain`` (parser only): a read whose match quality is below the calibrated thresholds is
    unreadable (:mod:`mosaic.evaluation.quality`); False credits the nearest allowed shape.
    ``position_bins`` (parser only): ``strict`` or ``nearest`` (an angle between two position bins
    read as the nearer bin, as MOSAIC's position classifier answers; a learned evaluator is a
    classifier and always answers a bin). ``workers`` (parser only): processes its reads are spread
    over (the same reads; :mod:`mosaic.evaluation.parallel_reads`).

    Raises:
        MosaicError: ``which`` is neither ``parser`` nor a trained evaluator directory, or the
            directory's concepts differ from the spec's.
    """
    if str(which) == "parser":
        from mosaic.evaluation.parser import SceneParser

        return SceneParser(spec, abstain=abstain, position_bins=position_bins, workers=workers)
    path = Path(which)
    if path.is_dir():
        from mosaic.evaluation.learned import LearnedEvaluator

        return LearnedEvaluator.load(path, spec, device=device)
    raise MosaicError(f"evaluator {str(which)!r} is neither 'parser' nor a directory: give --evaluator parser, or a "
                      "directory made by `mosaic evaluator train SPEC --out DIR`")
