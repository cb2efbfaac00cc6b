"""Transformer lab: tokenizer, swap negatives, metrics on constructed inputs, tiny runs of each
objective on images and tokens (through the shared loop), CLI."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from mosaic.lab.transformer.binding import (
    concept_positives, object_positives, ranking_accuracy, ranking_correct, soft_cross_entropy, swap_negatives,
)
from mosaic.lab.config import ConfigError, validate_config
from mosaic.lab.transformer.encoders import TokenEncoder, ViTEncoder
from mosaic.lab.transformer.factorization import linear_factorization
from mosaic.lab.transformer.tokens import EOO, EOS, PAD, SOO, SceneTokenizer, TokenizationError, object_table
from mosaic.lab.transformer import TransformerConfig, binding_metrics, run_transformer
from mosaic.spec import load_spec

from .conftest import SPECS

# ----------------------------------------------------------------------------------------------
# tokens
# ----------------------------------------------------------------------------------------------


def test_tokenizer_of_the_binding_spec():
    spec = load_spec(SPECS / "binding.yaml")
    tok = SceneTokenizer.from_spec(spec)
    assert tok.attributes == ["color", "shape"]
    assert len(tok.values["color"]) == 8 and tok.values["shape"] == ["circle", "square", "triangle"]
    assert tok.vocab_size == 4 + 8 + 3 and tok.max_objects == 2 and tok.max_len == 9 and tok.n_object_types == 24
    rec = {"scene": {"objects": [{"color": "blue", "shape": "square", "size": 0.26}, {"color": "red", "shape": "circle", "size": 0.26}]}}
    objs = tok.objects_of(rec)
    assert objs == [(2, 1), (0, 0)]
    seq = tok.encode_scene(objs)
    c, s = tok.offsets["color"], tok.offsets["shape"]
    assert seq == [SOO, c + 2, s + 1, EOO, SOO, c + 0, s + 0, EOO, EOS]
    assert tok.encode_scene(objs[:1]) == [SOO, c + 2, s + 1, EOO, EOS, PAD, PAD, PAD, PAD]
    q = tok.object_queries(torch.tensor([[2, 1]]))
    assert q.tolist() == [[SOO, c + 2, s + 1, EOO, EOS]]
    cq, keys = tok.concept_queries()
    assert cq.shape == (11, 5) and cq[8].tolist() == [s + 0, EOS, PAD, PAD, PAD] and keys[8] == ("shape", 0)
    assert tok.type_of(tok.type_id((2, 1))) == (2, 1)
    table = object_table(tok, [rec])
    assert table.shape == (1, 2, 2) and table[0].tolist() == [[2, 1], [0, 0]]
    with pytest.raises(TokenizationError, match="not in the token vocabulary"):
        tok.object_tuple({"color": "pink", "shape": "circle"})


def test_positions_and_relations_are_scene_fact_tokens():
    rel = SceneTokenizer.from_spec(load_spec(SPECS / "relation.yaml"))
    assert rel.attributes == ["color"] and rel.facts == {"relation": ["left_of", "right_of", "above", "below"]}
    assert rel.max_len == 3 * 2 + 1 + 1 and rel.vocab_size == 4 + 8 + 4
    rec = {"concepts": {"square_color": "blue", "circle_color": "red", "relation": "above"},
           "scene": {"objects": [{"color": "blue", "shape": "square", "size": 0.2}, {"color": "red", "shape": "circle", "size": 0.2}]}}
    c, r = rel.offsets["color"], rel.fact_offsets["relation"]
    assert rel.facts_of(rec) == [2]
    assert rel.encode_scene(rel.objects_of(rec), rel.facts_of(rec)) == [SOO, c + 2, EOO, SOO, c + 0, EOO, r + 2, EOS]
    assert rel.encode_scene(rel.objects_of(rec), [-1]) == [SOO, c + 2, EOO, SOO, c + 0, EOO, EOS, PAD]
    # queries never hold facts; fact ids are disjoint from attribute ids
    assert rel.query_len == 4 and r >= c + len(rel.values["color"])
    with pytest.raises(TokenizationError, match="relation 'inside'"):
        rel.facts_of({"concepts": {"relation": "inside"}})
    pos = SceneTokenizer.from_spec(load_spec(SPECS / "position.yaml"))
    assert list(pos.facts) == ["position"] and len(pos.facts["position"]) == 10
    assert pos.values["color"][0] == "brown"  # the reference's fixed colour, then the target's


def test_tiny_classifier_on_relation_tokens_learns_the_relation(tmp_path, write_spec):
    """The relation is in the token form, so a token classifier can read it (chance is 1/4)."""
    from .conftest import tiny

    data = tiny(SPECS / "relation.yaml", size=16, train=200, val=8, test=64)
    spec = write_spec(data)
    cfg = validate_config(TransformerConfig, {
        "name": "rel", "out": str(tmp_path / "run"), "objective": "classifier",
        "dataset": {"spec": str(spec), "root": str(tmp_path / "data"), "workers": 1},
        "classifier": {"concepts": ["relation"]},
        "input": {"kind": "tokens"}, "model": {"width": 32, "depth": 1, "heads": 2},
        "training": {"steps": 150, "batch_size": 32, "lr": 3e-3, "threads": 1, "log_every": 50, "checkpoint_every": 150}})
    m = run_transformer(cfg, say=lambda s: None)
    assert m["table"]["test"]["relation"] >= 0.9


def test_tokenizer_refuses_a_spec_without_object_attribute_concepts():
    with pytest.raises(TokenizationError, match="use input: image"):
        SceneTokenizer.from_spec(load_spec(SPECS / "clevr_like.yaml"))


# ----------------------------------------------------------------------------------------------
# swap negatives
# ----------------------------------------------------------------------------------------------


def test_swap_negatives_of_a_two_object_scene():
    # red circle + blue square -> red square, blue circle (each one attribute exchanged)
    assert sorted(swap_negatives([(0, 0), (2, 1)])) == [(0, 1), (2, 0)]
    # a shared value cannot be swapped; identical objects have no swap
    assert sorted(swap_negatives([(0, 0), (0, 1)])) == []
    assert swap_negatives([(1, 1), (1, 1)]) == []
    assert swap_negatives([(1, 1)]) == [] and swap_negatives([(1, 1), (-1, -1)]) == []
    rng = np.random.default_rng(0)
    assert len(swap_negatives([(0, 0, 0), (1, 1, 1), (2, 2, 2)], rng, k=2)) == 2


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 2), st.integers(0, 1)), min_size=1, max_size=4))
def test_swap_negatives_exchange_exactly_one_attribute_and_are_never_present(objects):
    present = set(objects)
    out = swap_negatives(objects)
    assert len(out) == len(set(out))
    for cand in out:
        assert cand not in present
        # some object i differs from it in exactly one attribute a, whose value comes from another object j
        ok = False
        for i, oi in enumerate(objects):
            diff = [a for a in range(3) if oi[a] != cand[a]]
            if len(diff) == 1 and any(j != i and oj[diff[0]] == cand[diff[0]] for j, oj in enumerate(objects)):
                ok = True
        assert ok, (objects, cand)
    # completeness: every valid single-attribute exchange is listed
    for i, oi in enumerate(objects):
        for j, oj in enumerate(objects):
            for a in range(3):
                c = oi[:a] + (oj[a],) + oi[a + 1:]
                if i != j and oi[a] != oj[a] and c not in present:
                    assert c in out


# ----------------------------------------------------------------------------------------------
# metrics on constructed inputs
# ----------------------------------------------------------------------------------------------


def test_ranking_rule_on_hand_made_logits():
    pos = torch.tensor([[1, 1, 0, 0]] * 4 + [[0, 0, 0, 0]], dtype=torch.bool)
    logits = torch.tensor([
        [3.0, 2.0, 1.0, 0.0],   # both positives on top: correct
        [3.0, 1.0, 2.0, 0.0],   # a negative outranks the lower positive: wrong
        [2.0, 2.0, 2.0, 0.0],   # tie between min positive and max negative: wrong
        [0.5, 0.4, 0.3, 0.39],  # correct
        [1.0, 0.0, 0.0, 0.0],   # no positive: left out
    ])
    correct, active = ranking_correct(logits, pos)
    assert correct.tolist() == [True, False, False, True, False] and active.tolist() == [True] * 4 + [False]
    assert ranking_accuracy(logits, pos) == 0.5


def test_binding_metrics_count_swap_negatives():
    tok = SceneTokenizer(["color", "shape"], {"color": ["red", "blue"], "shape": ["circle", "square"]}, 2)
    # both scenes: red circle (type 0) + blue square (type 3); swaps are red square (1) and blue circle (2)
    objects = torch.tensor([[[0, 0], [1, 1]], [[0, 0], [1, 1]]])
    obj_logits = torch.tensor([[5.0, 1.0, 1.0, 4.0],      # present types on top: correct
                               [5.0, 4.5, 1.0, 4.0]])     # the swap red square outranks blue square: wrong
    con_logits = torch.tensor([[3.0, 3.0, 3.0, 3.0],      # all four values are present: correct
                               [3.0, 3.0, 3.0, 3.0]])
    m = binding_metrics(con_logits, obj_logits, objects, tok)
    assert m["object_accuracy"] == 0.5 and m["swap_accuracy"] == 0.5 and m["concept_accuracy"] == 1.0 and m["n"] == 2
    assert m["no_swap_fraction"] == 0.0
    assert concept_positives(objects, tok.radix).tolist() == [[True, True, True, True]] * 2
    assert object_positives(objects, torch.tensor([[0, 0], [0, 1], [1, 1]])).tolist() == [[True, False, True]] * 2



def test_object_accuracy_on_swap_scenes_leaves_out_scenes_without_a_swap_negative():
    tok = SceneTokenizer(["color", "shape"], {"color": ["red", "blue"], "shape": ["circle", "square"]}, 2)
    # types: 0 red circle, 1 red square, 2 blue circle, 3 blue square
    objects = torch.tensor([
        [[0, 0], [1, 1]],   # red circle + blue square: swaps red square (1), blue circle (2)
        [[0, 0], [1, 1]],
        [[0, 0], [0, 1]],   # red circle + red square: share the colour, no swap negative
        [[0, 0], [-1, -1]], # one object: no swap negative
    ])
    obj_logits = torch.tensor([
        [5.0, 1.0, 1.0, 4.0],   # swap scene, correct
        [5.0, 4.5, 1.0, 4.0],   # swap scene, the swap red square outranks blue square: wrong
        [5.0, 4.0, 1.0, 1.0],   # no-swap scene, correct (a bag of concepts gets it right)
        [5.0, 1.0, 1.0, 1.0],   # single object, correct
    ])
    m = binding_metrics(torch.zeros(4, 4), obj_logits, objects, tok)
    assert m["object_accuracy"] == 0.75 and m["no_swap_fraction"] == 0.5
    assert m["object_accuracy_swap_scenes"] == 0.5 and m["swap_accuracy"] == 0.5
    # no scene with a swap negative: undefined, not 0 or 1
    m = binding_metrics(torch.zeros(2, 4), obj_logits[2:], objects[2:], tok)
    assert math.isnan(m["object_accuracy_swap_scenes"]) and m["object_accuracy"] == 1.0

def test_soft_cross_entropy_targets_are_uniform_over_positives():
    pos = torch.tensor([[True, True, False, False], [False, False, False, False]])
    assert math.isclose(float(soft_cross_entropy(torch.zeros(2, 4), pos)), math.log(4), rel_tol=1e-6)
    sharp = torch.tensor([[50.0, 50.0, -50.0, -50.0], [0.0, 0.0, 0.0, 0.0]])
    assert math.isclose(float(soft_cross_entropy(sharp, pos)), math.log(2), rel_tol=1e-5)  # the best a 2-positive row can do
    assert float(soft_cross_entropy(torch.zeros(1, 3), torch.zeros(1, 3, dtype=torch.bool))) == 0.0


def _grid(n_a, n_b, reps=1):
    a, b = np.meshgrid(np.arange(n_a), np.arange(n_b), indexing="ij")
    y = np.stack([a.ravel(), b.ravel()], 1)
    return np.repeat(y, reps, axis=0)


def test_linear_factorization_of_additive_random_and_half_additive_embeddings():
    rng = np.random.default_rng(0)
    y = _grid(5, 4, reps=3)
    ua, ub = rng.normal(size=(5, 16)), rng.normal(size=(4, 16))
    x = ua[y[:, 0]] + ub[y[:, 1]] + 7.0  # an offset is removed by centring
    r = linear_factorization(x, y, ["color", "shape"])
    assert r["r2"] == pytest.approx(1.0, abs=1e-9) and r["n"] == 60 and r["per_concept"]["color"]["values"] == 5
    # random embeddings: only the 3 + 4 = 7 fitted directions of 59 explain anything
    yr = _grid(6, 6, reps=30)
    r = linear_factorization(rng.normal(size=(len(yr), 32)), yr)
    assert r["r2"] < 0.03
    # a balanced 2x2 grid with an interaction term of equal energy to the main effects: R² = 0.5 exactly
    y2 = _grid(2, 2)
    s = 2 * y2 - 1
    x2 = np.stack([0.5 * s[:, 0], 0.5 * s[:, 1], math.sqrt(0.5) * s[:, 0] * s[:, 1]], 1)
    r = linear_factorization(torch.tensor(x2), torch.tensor(y2))
    assert r["r2"] == pytest.approx(0.5, abs=1e-12)
    assert r["cross_concept_abs_cos"] == pytest.approx(0.0, abs=1e-12)  # colour moves dim 0, shape dim 1
    assert r["within_concept_abs_cos"] == pytest.approx(1.0)              # two values of a concept: opposite factors
    # samples with a missing label are left out; shapes are checked
    y3 = np.concatenate([y, [[-1, 0]]])
    x3 = np.concatenate([ua[y[:, 0]] + ub[y[:, 1]], rng.normal(size=(1, 16)) * 100])
    assert linear_factorization(x3, y3)["r2"] == pytest.approx(1.0, abs=1e-9)
    with pytest.raises(ValueError, match="same N"):
        linear_factorization(np.zeros((3, 2)), np.zeros((4, 1), int))


def test_encoders_shapes():
    vit = ViTEncoder(16, patch=4, width=16, depth=1, heads=2)
    assert vit(torch.zeros(3, 3, 16, 16, dtype=torch.uint8)).shape == (3, 16)
    assert vit(torch.zeros(2, 3, 32, 32)).shape == (2, 16)  # resized to 16
    conv = ViTEncoder(16, patch=4, width=16, depth=1, heads=2, stem="conv")
    assert conv(torch.zeros(2, 3, 16, 16)).shape == (2, 16)
    with pytest.raises(ValueError, match="must divide"):
        ViTEncoder(18, patch=4)
    enc = TokenEncoder(10, 6, width=16, depth=1, heads=2).eval()
    x = torch.tensor([[1, 5, 2, 3, 0, 0], [1, 5, 2, 3, 0, 0]])
    y = torch.tensor([[1, 5, 2, 3, 0, 0], [1, 5, 2, 3, 7, 9]])  # padding content must not matter...
    y[1, 4:] = 0
    assert torch.allclose(enc(x)[0], enc(y)[1], atol=1e-6)


# ----------------------------------------------------------------------------------------------
# tiny runs through the shared loop
# ----------------------------------------------------------------------------------------------

BINDING_SPEC = {
    "name": "tiny_binding", "seed": 0, "image": {"size": 16},
    "concepts": {"color1": {"values": ["red", "green", "blue", "yellow"]}, "shape1": {"values": ["circle", "square"]},
                 "color2": {"values": ["red", "green", "blue", "yellow"]}, "shape2": {"values": ["circle", "square"]}},
    "objects": [{"name": "left", "shape": {"concept": "shape1"}, "color": {"concept": "color1"}, "size": 0.3},
                {"name": "right", "shape": {"concept": "shape2"}, "color": {"concept": "color2"}, "size": 0.3}],
    "holdout": {"concepts": ["color1", "shape1", "color2", "shape2"],
                "rule": {"kind": "objects", "slots": [["color1", "shape1"], ["color2", "shape2"]], "objects": [["green", "square"], ["yellow", "circle"]]}},
    "splits": {"train": 1, "val": 1, "test_id": 1, "test_ood": 1, "per": "combination"},
}


@pytest.fixture(scope="module")
def specs(tmp_path_factory):
    d = tmp_path_factory.mktemp("specs")
    cov = yaml.safe_load((SPECS / "coverage.yaml").read_text())
    cov["image"]["size"] = 16
    cov["splits"] = {"train": 2, "val": 1, "test_id": 1, "test_ood": 1, "per": "combination"}
    (d / "coverage.yaml").write_text(yaml.safe_dump(cov))
    (d / "binding.yaml").write_text(yaml.safe_dump(BINDING_SPEC))
    return d


def _cfg(specs, tmp, objective, kind, **extra):
    data = {
        "name": f"{objective}-{kind}", "out": str(tmp / f"run-{objective}-{kind}"), "objective": objective,
        "dataset": {"spec": str(specs / ("coverage.yaml" if objective == "classifier" else "binding.yaml")),
                    "root": str(specs.parent / "data"), "workers": 1},
        "input": {"kind": kind},
        "model": {"width": 16, "depth": 1, "heads": 2, "embed_dim": 8, "patch": 4},
        "training": {"steps": 2, "batch_size": 8, "lr": 1e-3, "log_every": 1, "checkpoint_every": 1, "threads": 1},
    }
    for k, v in extra.items():
        data[k] = {**data.get(k, {}), **v}
    return validate_config(TransformerConfig, data)


@pytest.mark.parametrize("kind", ["tokens", "image"])
def test_tiny_classifier_run(specs, tmp_path, kind):
    cfg = _cfg(specs, tmp_path, "classifier", kind)
    m = run_transformer(cfg, say=lambda s: None)
    run = cfg.run_dir()
    assert (run / "DONE").is_file() and json.loads((run / "metrics.json").read_text())["objective"] == "classifier"
    acc = m["table"]
    assert acc["seen"]["n"] == 16 and acc["held_out"]["n"] == 48  # k = 2 of 8 shapes per colour seen
    for group in ("seen", "held_out"):
        assert set(acc[group]) == {"color", "shape", "joint", "n"}
        assert 0.0 <= acc[group]["joint"] <= min(acc[group]["color"], acc[group]["shape"]) <= 1.0
    assert len(m["per_cell"]) == 64 and sum(c["held_out"] for c in m["per_cell"].values()) == 48
    assert m["pictures"] == [str(run / "heatmap.png")] and (run / "heatmap.png").stat().st_size > 1000
    fac = m["factorization"]
    assert fac["n"] == 64 and fac["r2"] <= 1.0 and 0.0 <= fac["cross_concept_abs_cos"] <= 1.0
    assert m["train"]["steps"] == 2 and m["checkpoint"] == "final"
    again = run_transformer(cfg, say=lambda s: None)  # a finished run is a no-op
    assert again["already_done"] and again["table"] == acc


@pytest.mark.parametrize("kind", ["tokens", "image"])
def test_tiny_binding_run(specs, tmp_path, kind):
    concepts = kind == "image"  # tokens: object queries only (as binding_tokens.yaml)
    cfg = _cfg(specs, tmp_path, "binding", kind, binding={"swap_negatives": 2, "concept_queries": concepts})
    m = run_transformer(cfg, say=lambda s: None)
    # the floor is in the table; untrained concept queries are not
    assert ("concept_accuracy" in m["table"]["held_out"]) == concepts and m["binding"]["concept_queries"] == concepts
    assert m["table"]["held_out"]["no_swap_fraction"] == m["binding"]["test_ood"]["no_swap_fraction"]
    from mosaic.lab.transformer import report_tables
    from rich.console import Console
    con = Console(width=200, record=True)
    for t in report_tables(m):
        con.print(t)
    text = con.export_text()
    assert "floor (no swap)" in text and ("concept queries were never trained" in text) == (not concepts)
    b = m["binding"]
    assert b["object_types"] == 8 and b["train_object_types"] == 6
    assert b["test_ood"]["n"] == 4 and b["test_id"]["n"] == 36  # 2 held-out types -> 2x2 held-out cells
    for split in ("test_id", "test_ood"):
        for k in ("object_accuracy", "concept_accuracy"):
            assert 0.0 <= b[split][k] <= 1.0
    assert m["tau"] > 0 and m["factorization"]["n"] == 40
    assert m["table"]["held_out"]["object_accuracy"] == b["test_ood"]["object_accuracy"] and m["table"]["seen"]["n"] == 36
    assert (cfg.run_dir() / "final" / "model.safetensors").is_file()


def test_binding_training_step_queries(specs, tmp_path):
    from mosaic.lab.data import resolve_dataset
    from mosaic.lab.transformer import build_task

    cfg = _cfg(specs, tmp_path, "binding", "tokens", binding={"swap_negatives": 1})
    task = build_task(cfg, resolve_dataset(cfg.dataset))
    objs, swaps = task.train_data["objects"][:8], task.train_data["swaps"][:8]
    cmask, oq = task.queries_for(objs, swaps, torch.Generator().manual_seed(0))
    present = {tuple(o) for o in objs.reshape(-1, 2).tolist() if o[0] >= 0}
    assert present <= {tuple(q) for q in oq.tolist()}
    # held-out types (green square = (1, 1), yellow circle = (3, 0)) never appear with negatives: train
    assert not ({(1, 1), (3, 0)} & {tuple(q) for q in oq.tolist()})
    queries = {tuple(q) for q in oq.tolist()}
    pos = object_positives(objs, oq)
    for n in range(len(objs)):
        table = [tuple(s) for s in swaps[n].tolist() if s[0] >= 0]
        assert set(table) == set(swap_negatives(objs[n].tolist())) - {(1, 1), (3, 0)}
        if table:  # the scene's drawn swap negative is a query, and a negative for it
            drawn = [q for q in table if q in queries]
            assert drawn and not any(pos[n, oq.tolist().index(list(q))] for q in drawn)
    loss = task.loss(task.model, {"x": task.train_data["x"][:8], "objects": objs, "swaps": swaps}, torch.Generator().manual_seed(0))
    assert loss.ndim == 0 and torch.isfinite(loss) and loss > 0


def test_config_errors_name_the_field(specs, tmp_path):
    from mosaic.lab.data import resolve_dataset
    from mosaic.lab.transformer import build_task

    cfg = _cfg(specs, tmp_path, "classifier", "tokens", classifier={"concepts": ["colour"]})
    with pytest.raises(ConfigError, match="classifier.concepts.*did you mean 'colour' -> 'color'"):
        build_task(cfg, resolve_dataset(cfg.dataset))
    cfg = _cfg(specs, tmp_path, "classifier", "image", model={"patch": 5})
    with pytest.raises(ConfigError, match="must divide"):
        build_task(cfg, resolve_dataset(cfg.dataset))
    with pytest.raises(ConfigError, match="objective"):
        validate_config(TransformerConfig, {"name": "x", "dataset": {"path": "d"}, "objective": "diffusion"})
    with pytest.raises(ConfigError, match="a binding: section has no effect with objective: classifier"):
        validate_config(TransformerConfig, {"name": "x", "dataset": {"path": "d"}, "objective": "classifier", "binding": {"swap_negatives": 2}})


def test_cli_names_the_config_file_of_an_error_found_against_the_dataset(specs, tmp_path):
    from typer.testing import CliRunner

    from mosaic.cli import app

    cfg = _cfg(specs, tmp_path, "classifier", "tokens", classifier={"concepts": ["colour"]})
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(cfg.model_dump(mode="json")))
    r = CliRunner().invoke(app, ["train", "transformer", str(path)])
    assert r.exit_code == 2 and f"invalid config {path}" in " ".join(r.output.split()) and not (tmp_path / "run-classifier-tokens").exists()


def test_cli_train_transformer(specs, tmp_path):
    from typer.testing import CliRunner

    from mosaic.cli import app

    cfg = _cfg(specs, tmp_path, "classifier", "tokens")
    p = tmp_path / "c.yaml"
    p.write_text(yaml.safe_dump(cfg.model_dump(mode="json")))
    out = tmp_path / "cli-run"
    r = CliRunner().invoke(app, ["train", "transformer", str(p), "--out", str(out), "--set", "training.steps=1"])
    assert r.exit_code == 0, r.output
    assert "joint" in r.output and "linear factorization" in r.output and (out / "DONE").is_file()
    r = CliRunner().invoke(app, ["train", "transformer", str(p), "--set", "objective=nope"])
    assert r.exit_code == 2 and "objective" in r.output


def test_binding_run_resumes_exactly(specs, tmp_path):
    import shutil

    cfg = _cfg(specs, tmp_path, "binding", "tokens", training={"steps": 4, "checkpoint_every": 2, "keep_checkpoints": 3},
               binding={"swap_negatives": 1, "random_negatives": 1})
    run = cfg.run_dir()
    run_transformer(cfg, say=lambda s: None)
    first = [r["loss"] for r in map(json.loads, (run / "log.jsonl").read_text().splitlines())]
    # interrupted after the step-2 checkpoint: the rerun resumes there and recomputes steps 3-4 exactly
    shutil.rmtree(run / "checkpoints" / "checkpoint-0000004")
    for f in ("DONE", "metrics.json"):
        (run / f).unlink()
    m = run_transformer(cfg, say=lambda s: None)
    again = [r["loss"] for r in map(json.loads, (run / "log.jsonl").read_text().splitlines())]
    assert m["train"]["resumed_at"] == 2 and len(first) == 4
    assert again == pytest.approx(first, rel=1e-6, abs=1e-7)


def test_classifier_without_holdout_reports_the_test_split(tmp_path, write_spec):
    from .conftest import COUNT_YAML

    spec = write_spec(COUNT_YAML)  # colour x count (1-4 circles), no holdout: splits train / val / test
    tok = SceneTokenizer.from_spec(load_spec(spec))
    assert tok.attributes == ["color"] and tok.max_objects == 4 and tok.max_len == 4 * 3 + 1
    cfg = validate_config(TransformerConfig, {
        "name": "count", "out": str(tmp_path / "run"), "objective": "classifier",
        "dataset": {"spec": str(spec), "root": str(tmp_path / "data"), "workers": 1},
        "input": {"kind": "tokens"}, "model": {"width": 16, "depth": 1, "heads": 2},
        "training": {"steps": 2, "batch_size": 4, "threads": 1}})
    m = run_transformer(cfg, say=lambda s: None)
    assert set(m["table"]) == {"test"} and m["table"]["test"]["n"] == 2 and "per_cell" not in m
    assert set(m["table"]["test"]) == {"color", "count", "joint", "n"}


def test_progress_bar_does_not_flood_a_log(specs, tmp_path, capfd):
    """Into a file (sweep trial logs, CI) the bar writes a line every 30 s, not one per step."""
    cfg = _cfg(specs, tmp_path, "classifier", "tokens", training={"steps": 40, "log_every": 20, "checkpoint_every": 40})
    run_transformer(cfg, say=lambda s: None)
    err = capfd.readouterr().err
    assert "40/40" in err and err.count("\r") <= 4
