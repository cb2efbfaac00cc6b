"""The transformer config: objective (classifier or binding), input, model shape and the
objectives' sections on top of the lab's run, dataset and training sections."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from mosaic.diagnostics.config import AnalysisSection
from mosaic.lab.config import RunConfig, _Base


class InputSection(_Base):
    """What the scene encoder reads: the rendered ``image`` (ViT) or the scene graph's ``tokens``."""

    kind: Literal["image", "tokens"] = "image"
    image_size: int | None = Field(None, ge=4, le=4096, description="resize images to this side for the ViT (default: the dataset's)")


class ModelSection(_Base):
    """Transformer shape, shared by the scene and query encoders."""

    patch: int = Field(4, ge=1, le=4096, description="ViT patch side in pixels (must divide the image side)")
    stem: Literal["patch", "conv"] = Field("patch", description="ViT stem: linear patch embedding, or early convolutions (Xiao et al. 2021)")
    width: int = Field(128, ge=8, le=16384)
    depth: int = Field(4, ge=1, le=256)
    heads: int = Field(4, ge=1, le=1024)
    mlp_ratio: float = Field(2.0, gt=0, le=64)
    dropout: float = Field(0.0, ge=0, lt=1)
    embed_dim: int = Field(64, ge=2, le=16384, description="binding: dimension of the shared scene/query embedding")


class ClassifierSection(_Base):
    concepts: list[str] | None = Field(None, description="concepts with a head (default: every concept of the spec)")


class BindingSection(_Base):
    """Queries and negatives of the dual encoder (defaults follow the reference code)."""

    concept_queries: bool = True
    object_queries: bool = True
    swap_negatives: int = Field(1, ge=0, le=1024, description="swap negatives drawn per scene and step")
    random_negatives: int = Field(0, ge=0, le=1024, description="random object-type negatives per present object type")
    negatives: Literal["all", "train"] = Field(
        "train", description="object types allowed as negatives in training: train (only types seen in train, so "
        "held-out types never occur in training at all) or all (the reference code's default: held-out types may be "
        "negatives, never positives; on small grids the model then learns to rank them last)")
    tau_init: float = Field(1.15, ge=-20, le=20)
    tau_max: float = Field(10.0, gt=0, le=1e4, description="clamp of exp(tau) in training (reference: 10)")

    @model_validator(mode="after")
    def _some(self):
        if not (self.concept_queries or self.object_queries):
            raise ValueError("enable concept_queries or object_queries (or both)")
        return self


class EvaluationSection(_Base):
    batch_size: int = Field(256, ge=1, le=2**20)
    factorization: bool = Field(True, description="linear-factorization R² and factor |cos| of the embeddings")
    checkpoint: Literal["final", "best"] = Field("final", description="weights to evaluate: final (EMA when enabled) or best on val")


class TransformerConfig(RunConfig):
    """``mosaic train transformer`` config: run, dataset and training sections (shared with the
    diffusion lab) plus the objective, the input, the model and objective options."""

    objective: Literal["classifier", "binding"]
    input: InputSection = Field(default_factory=InputSection)
    model: ModelSection = Field(default_factory=ModelSection)
    classifier: ClassifierSection = Field(default_factory=ClassifierSection)
    binding: BindingSection = Field(default_factory=BindingSection)
    evaluation: EvaluationSection = Field(default_factory=EvaluationSection)
    analysis: AnalysisSection | None = Field(None, description="representation diagnostics after training (mosaic.diagnostics; docs/diagnostics.md)")

    @model_validator(mode="after")
    def _sections_of_the_objective(self):
        other = {"classifier": "binding", "binding": "classifier"}[self.objective]
        section = getattr(self, other)
        if other in self.model_fields_set and section != type(section)():  # a dumped config carries the defaults: fine
            raise ValueError(f"a {other}: section has no effect with objective: {self.objective}: remove it "
                             f"(or set objective: {other})")
        return self
