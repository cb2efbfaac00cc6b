"""An autoencoder's quality check and latent cache are keyed by ``vae/config.json``'s sha256 too (attack
round 18, issue 23): a check saved before that (no ``config_sha256``) is measured again, never trusted;
``autoencoder.json`` records the config's sha256 and an edited config is refused where it does."""

from __future__ import annotations

import json
import shutil

import pytest

from mosaic.errors import TrainingError

@pytest.fixture(scope="module")
def ae(tmp_path_factory):
    from tests.conftest import tiny_autoencoder

    return tiny_autoencoder(tmp_path_factory, "aem", steps=2)[:3]


def _measured(monkeypatch):
    import mosaic.lab.autoencoder as ae_mod

    calls = []
    real = ae_mod.check_autoencoder

    def spy(*a, **k):
        calls.append(1)
        return real(*a, **k)

    monkeypatch.setattr(ae_mod, "check_autoencoder", spy)
    return calls


def test_a_check_saved_for_this_config_is_reused(ae, tmp_path, monkeypatch):
    from mosaic.lab.autoencoder import checked

    src, sec, spec = ae
    f = tmp_path / "ae"
    shutil.copytree(src, f)
    (check,) = f.glob("check-*.json")
    assert "config_sha256" in json.loads(check.read_text())
    calls = _measured(monkeypatch)
    checked(f, sec, spec, say=lambda m: None)
    assert calls == []


def test_a_check_saved_before_it_recorded_the_config_is_measured_again(ae, tmp_path, monkeypatch):
    from mosaic.lab.autoencoder import checked

    src, sec, spec = ae
    f = tmp_path / "ae"
    shutil.copytree(src, f)
    (check,) = f.glob("check-*.json")
    old = json.loads(check.read_text())
    del old["config_sha256"]
    check.write_text(json.dumps(old))
    calls = _measured(monkeypatch)
    res = checked(f, sec, spec, say=lambda m: None)
    assert calls == [1] and "config_sha256" in res


def test_an_edited_config_of_a_folder_whose_record_predates_config_sha256_is_checked_and_encoded_again(ae, tmp_path, monkeypatch):
    import torch

    from mosaic.dataset import generate
    from mosaic.lab.autoencoder import checked, load_space
    from mosaic.lab.diffusion.latent import cached_latents
    from mosaic.torch_data import MosaicDataset

    src, sec, spec = ae
    f = tmp_path / "ae"
    shutil.copytree(src, f)
    data = tmp_path / "data"
    generate(spec, data)
    images = MosaicDataset(data, "train").images[:4]
    z0 = cached_latents(load_space(f), data, "train", images, say=lambda m: None)
    rec = json.loads((f / "autoencoder.json").read_text())
    del rec["config_sha256"]  # an autoencoder trained before the record named its config
    (f / "autoencoder.json").write_text(json.dumps(rec))
    p = f / "vae" / "config.json"
    c = json.loads(p.read_text())
    c["scaling_factor"] = 30.0
    p.write_text(json.dumps(c, indent=2))
    space = load_space(f)
    said = []
    z1 = cached_latents(space, data, "train", images, say=said.append)
    assert said and said[0].startswith("encoding")  # not the cache of the other config
    assert not torch.allclose(z0, z1)
    calls = _measured(monkeypatch)
    checked(f, sec, spec, space, say=lambda m: None)
    assert calls == [1]


def test_an_edited_config_is_refused_where_the_record_names_it(ae, tmp_path):
    from mosaic.lab.autoencoder import load_space

    src, _, _ = ae
    f = tmp_path / "ae"
    shutil.copytree(src, f)
    p = f / "vae" / "config.json"
    c = json.loads(p.read_text())
    c["act_fn"] = "relu"
    p.write_text(json.dumps(c, indent=2))
    with pytest.raises(TrainingError, match="config.json.*autoencoder.json"):
        load_space(f)
