"""An autoencoder's checkpoint and folder are of one spec and section (attack round 21).

- ``partial/checkpoint/state.json`` records the spec fingerprint and the section's weights key, and its
  ``step`` must be a whole number below the training's steps that agrees with its saved losses; any other
  checkpoint is not resumed from: the training starts over, saying why.
- ``train_autoencoder`` into a folder holding a finished autoencoder of another spec or section refuses,
  naming the folder, both values and the fix; it never returns the other model as "already trained".
"""

from __future__ import annotations

import json
import shutil

import pytest

from mosaic.errors import TrainingError
from mosaic.lab.autoencoder_files import checkpoint_problem, refuse_other_training, training_identity


def _section(**kw):
    from mosaic.lab.autoencoder import AutoencoderSection

    return AutoencoderSection(**{**dict(factor=4, block_out_channels=[8, 16, 16], norm_num_groups=4, steps=4, batch_size=4, check_n=4,
                                        device="cpu", threshold=0, checkpoint_every=1), **kw})


def _spec():
    from mosaic.spec import parse_spec
    from tests.test_latent import SPEC

    return parse_spec(SPEC)


@pytest.fixture(scope="module")
def stopped(tmp_path_factory):
    """A 4-step training stopped after step 2's checkpoint."""

    from tests.conftest import stopped_autoencoder

    out = stopped_autoencoder(tmp_path_factory, "aeid", _section(), _spec())
    return out


def _run(src, tmp_path, monkeypatch, edit=None, sec=None):
    import mosaic.lab.autoencoder as ae

    out = tmp_path / "ae"
    shutil.copytree(src, out)
    state = out / "partial" / "checkpoint" / "state.json"
    if edit is not None:
        d = json.loads(state.read_text())
        edit(d)
        state.write_text(json.dumps(d))
    calls, said = [], []
    real = ae.reconstruction_loss
    monkeypatch.setattr(ae, "reconstruction_loss", lambda *a, **k: calls.append(1) or real(*a, **k))
    rec = ae.train_autoencoder(sec or _section(), _spec(), out, say=said.append, progress=False)
    return rec, len(calls), said


def test_the_checkpoint_records_the_spec_and_section(stopped):
    meta = json.loads((stopped / "partial" / "checkpoint" / "state.json").read_text())
    assert {k: meta[k] for k in ("spec_fingerprint", "weights_key")} == training_identity(_section(), _spec())
    assert meta["step"] == 2 and len(meta["losses"]) == 2


@pytest.mark.parametrize("edit, said", [
    (lambda d: d.__setitem__("step", 3), "does not agree with its 2 saved losses"),
    (lambda d: d.update(step=3, losses=[1.0, 1.0, 1.0]), None),  # 3 < 4 steps and 3 losses: resumed (the record is believed)
    (lambda d: d.__setitem__("step", "2"), "not a whole number"),
    (lambda d: d.__setitem__("losses", ["x", 1.0]), "not all numbers"),
    (lambda d: d.pop("weights_key"), "records no weights_key"),
    (lambda d: d.__setitem__("spec_fingerprint", "0" * 64), "records spec_fingerprint"),
])
def test_a_checkpoint_that_is_not_this_trainings_is_not_resumed(stopped, tmp_path, monkeypatch, edit, said):
    rec, ran, lines = _run(stopped, tmp_path, monkeypatch, edit=edit)
    if said is None:
        assert ran == 1 and rec["resumed_at"] == 3
        return
    assert ran == 4 and rec["resumed_at"] == 0 and rec["steps"] == 4
    assert any("starting over" in s and said in s for s in lines), lines


def test_a_finished_folder_of_another_section_is_refused_naming_both_values(stopped, tmp_path, monkeypatch):
    import mosaic.lab.autoencoder as ae

    rec, ran, _ = _run(stopped, tmp_path, monkeypatch)
    assert ran == 2
    again = ae.train_autoencoder(_section(), _spec(), tmp_path / "ae", say=lambda m: None, progress=False)
    assert again["already_trained"] and again["weights_key"] == rec["weights_key"]
    other = _section(seed=7)
    with pytest.raises(TrainingError) as e:
        ae.train_autoencoder(other, _spec(), tmp_path / "ae", say=lambda m: None, progress=False)
    msg = str(e.value)
    assert str(tmp_path / "ae") in msg and rec["weights_key"] in msg and other.weights_key() in msg and "--out" in msg
    assert json.loads((tmp_path / "ae" / "autoencoder.json").read_text())["weights_key"] == rec["weights_key"]  # not trained over
    # its weights file gone: the folder is still another training's, refused, not trained over with this section
    (tmp_path / "ae" / "vae" / "diffusion_pytorch_model.safetensors").unlink()
    with pytest.raises(TrainingError, match="another spec or section"):
        ae.train_autoencoder(other, _spec(), tmp_path / "ae", say=lambda m: None, progress=False)
    assert json.loads((tmp_path / "ae" / "autoencoder.json").read_text())["weights_key"] == rec["weights_key"]


def test_helpers_on_records_of_other_kinds(tmp_path):
    ident = {"spec_fingerprint": "a", "weights_key": "b"}
    ok = {**ident, "step": 1, "losses": [0.5]}
    assert checkpoint_problem(ok, 4, ident) is None
    for bad in ({**ok, "step": True}, {**ok, "step": -1, "losses": []}, {**ok, "step": 4, "losses": [1] * 4}, {**ok, "losses": None},
                {**ok, "weights_key": "c"}, {"step": 1, "losses": [0.5]}):
        assert checkpoint_problem(bad, 4, ident) is not None, bad
    refuse_other_training({**ident}, ident, tmp_path)
    with pytest.raises(TrainingError, match="spec_fingerprint None"):
        refuse_other_training({"weights_key": "b"}, ident, tmp_path)
