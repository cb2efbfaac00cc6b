"""Latent diffusion's data: a dataset's images encoded once by the run's autoencoder and cached.

The cache is ``<autoencoder folder>/latents/<dataset manifest sha256, 16>/<split>.safetensors``
(``latents`` float32 ``[N, C, S/f, S/f]``, the first N images of the split) with a
``<split>.json`` beside it. It stores the **posterior mean** (shifted and scaled, see
:class:`mosaic.lab.autoencoder.LatentSpace`), not a sample: MOSAIC stores one sample of the SD2
VAE's posterior and reuses it every epoch, which is one fixed draw of noise per image; the
from-scratch autoencoder here is trained with a KL weight of 1e-6, so its posterior spread is a
small fraction of the latents' spread (``posterior_std_over_latent_std`` in ``autoencoder.json``)
and the mean is what its quality check reconstructs and the evaluator reads, deterministic and
independent of any seed.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import torch

from mosaic.lab.autoencoder import LatentSpace
from mosaic.lab.data import manifest_fingerprint, to_float
from mosaic.checksums import digest_file
from mosaic.io import atomic_write, own_folders, read_json
from mosaic.lab.autoencoder_files import VAE_FILES, vae_identity


def encode_images(space: LatentSpace, images: torch.Tensor, batch_size: int = 256, progress=None) -> torch.Tensor:
    """uint8 ``[N, 3, S, S]`` -> float32 ``[N, C, S/f, S/f]`` latents (posterior means), on the CPU."""
    out = []
    for a in range(0, len(images), batch_size):
        out.append(space.encode(to_float(images[a:a + batch_size])).float().cpu())
        if progress:
            progress(min(a + batch_size, len(images)))
    c, s = space.channels, 0
    return torch.cat(out) if out else torch.zeros((0, c, s, s))


#: cached latents compared with their images encoded again, at indices no file can anticipate
SPOT_CHECK = 16


def _spot_check(space: LatentSpace, images: torch.Tensor, z: torch.Tensor) -> bool:
    """Whether :data:`SPOT_CHECK` latents of ``z`` (drawn by the system's random source) are the
    encodings of their images now, within float noise between hosts (1e-3 of the latents' scale)."""
    import random

    n = min(len(images), len(z))
    if n == 0:
        return True
    idx = sorted(random.SystemRandom().sample(range(n), min(SPOT_CHECK, n)))
    again = encode_images(space, images[idx])
    scale = max(1.0, float(again.abs().max()))
    return bool(torch.allclose(again, z[idx], rtol=0, atol=1e-3 * scale))


def cached_latents(space: LatentSpace, dataset_root: Path, split: str, images: torch.Tensor, say=print) -> torch.Tensor:
    """The latents of ``images`` (the first ``len(images)`` of ``split`` of the dataset), from the
    cache or encoded and written to it (atomically; only one writer needs to win).

    A cached file is used only when its record (``<split>.json``) names this split, the sha256 of
    the file itself and of the autoencoder's weights and ``vae/config.json`` (``vae_sha256``,
    ``config_sha256``: an edited ``scaling_factor`` scales latents otherwise), at least ``n`` latents,
    and the file holds latents of that shape, and :data:`SPOT_CHECK` of its latents, at indices drawn
    afresh each time, are those of their images encoded now (:func:`_spot_check`): another split's file
    copied over it (held-out latents in training, its record resealed with the file's sha256: attack
    round 23), latents of other weights or another config, or a damaged file are encoded again, never
    read as these."""
    from safetensors.torch import load_file, save

    fp = manifest_fingerprint(dataset_root)
    folder = (space.folder or Path(".")) / "latents" / fp["manifest_sha256"][:16]
    path, meta = folder / f"{split}.safetensors", folder / f"{split}.json"
    n = len(images)
    side = space.size(images.shape[-1])
    known = space.folder is not None and all((space.folder / "vae" / n).is_file() for n in VAE_FILES)
    vae = vae_identity(space.folder) if known else {"vae_sha256": None, "config_sha256": None}
    if path.is_file() and meta.is_file():
        try:
            info = read_json(meta)
            if (isinstance(info, dict) and isinstance(info.get("n"), int) and info["n"] >= n and info.get("split") == split
                    and all(info.get(k) == v for k, v in vae.items()) and info.get("sha256") == digest_file(path)[0]):
                z = load_file(str(path))["latents"]
                if z.dtype == torch.float32 and list(z.shape) == [info["n"], space.channels, side, side] and _spot_check(space, images, z):
                    return z[:n]
        except Exception:  # noqa: BLE001 - a damaged cache file (OSError, JSON, SafetensorError): encoded again
            pass
    say(f"encoding {n} {split} images into latents ({space.channels} x {side} x {side})")
    z = encode_images(space, images)
    own_folders(folder.parent.parent, [f"latents/{folder.name}"])  # a link at latents/ (or its folder) is removed: never written elsewhere
    blob = save({"latents": z.contiguous()})
    atomic_write(path, blob)  # a unique O_EXCL temporary file: never written through a link
    atomic_write(meta, json.dumps({"n": n, "split": split, "dataset": fp, "stored": "posterior mean (shifted, scaled)",
                                   "shape": list(z.shape), "sha256": hashlib.sha256(blob).hexdigest(), **vae},
                                  indent=2) + "\n")
    return z


__all__ = ["cached_latents", "encode_images"]
