"""Training-set copies: how close a diffusion model's samples come to its own training images.

A model that memorised its training set draws near-copies of training images; one that learned
the distribution draws new images, about as far from the training set as fresh renders of the same
distribution are. For every sample and every **reference** image (a held-back split of the same
dataset, e.g. ``test_id``: rendered by the generator, never trained on) this measures the distance
to the nearest training image, as the root-mean-square pixel difference in sRGB units (0-255).
A sample counts as a **copy** when it is closer to a training image than all but 5 % of the
reference images are (below the reference's 5th percentile): without memorisation about 5 % of
samples fall there by chance; a memorising model puts most of them there.

This is the pixel-space form of the extraction test of Carlini et al. 2023 ("Extracting Training
Data from Diffusion Models", an (l2, delta) nearest-neighbour criterion) and of Somepalli et al.
2023, made exact for a renderer whose images differ only by their scene: no feature extractor is
needed, and two renders of one scene graph are pixel-identical.
"""

from __future__ import annotations

import numpy as np

#: A sample closer to a training image than this share of reference images is a copy.
COPY_QUANTILE = 0.05


def nearest_rmse(queries: np.ndarray, train: np.ndarray, chunk: int = 512) -> tuple[np.ndarray, np.ndarray]:
    """Distance from each query image to its nearest training image.

    Args:
        queries: uint8 ``[N, H, W, 3]``.
        train: uint8 ``[M, H, W, 3]`` (same ``H, W``), ``M >= 1``.
        chunk: queries per matrix product (memory ``chunk * M`` floats).
    Returns:
        ``(rmse, index)``: float64 ``[N]`` root-mean-square pixel difference (sRGB units, 0-255)
        to the nearest training image, and int64 ``[N]`` its index in ``train``.
    Raises:
        ValueError: shapes that differ or an empty training set.
    """
    if train.ndim != 4 or queries.ndim != 4 or queries.shape[1:] != train.shape[1:] or len(train) == 0:
        raise ValueError(f"queries {list(queries.shape)} and train {list(train.shape)} must be [N, H, W, 3] of one size, train non-empty")
    t = train.reshape(len(train), -1).astype(np.float64)
    tn = (t * t).sum(1)
    d = t.shape[1]
    rmse, idx = np.empty(len(queries)), np.empty(len(queries), np.int64)
    for s in range(0, len(queries), chunk):
        q = queries[s:s + chunk].reshape(-1, d).astype(np.float64)
        sq = (q * q).sum(1)[:, None] + tn[None] - 2.0 * q @ t.T  # [n, M] squared distances
        j = sq.argmin(1)
        # the nearest one's distance recomputed exactly (the expansion loses precision near 0)
        exact = ((q - t[j]) ** 2).sum(1)
        rmse[s:s + chunk] = np.sqrt(exact / d)
        idx[s:s + chunk] = j
    return rmse, idx


def copy_stats(samples: np.ndarray, train: np.ndarray, reference: np.ndarray) -> dict:
    """Nearest-training-image distances of ``samples`` against those of ``reference`` images.

    Args:
        samples: uint8 ``[N, H, W, 3]`` generated images (of seen combinations).
        train: uint8 ``[M, H, W, 3]`` the training images.
        reference: uint8 ``[R, H, W, 3]`` fresh renders of the same distribution, not trained on.
    Returns:
        ``{"samples": {n, median_rmse, copy_share}, "reference": {n, median_rmse, threshold},
        "train": {n}, "ratio"}`` (RMSE in sRGB units): ``threshold`` is the reference's
        :data:`COPY_QUANTILE` quantile of nearest-training distances, ``copy_share`` the share of
        samples below it (about 0.05 without memorisation; None, with a ``note``, when the threshold
        is 0: fresh renders repeat training images exactly), ``ratio`` the samples' median over the
        reference's (well below 1: the samples sit closer to the training set than new images do).
    Raises:
        ValueError: images of different sizes, or an empty set.
    """
    if len(samples) == 0 or len(reference) == 0:
        raise ValueError("copy_stats needs at least one sample and one reference image")
    d_s, _ = nearest_rmse(samples, train)
    d_r, _ = nearest_rmse(reference, train)
    thr = float(np.quantile(d_r, COPY_QUANTILE))
    med_r = float(np.median(d_r))
    out = {
        "samples": {"n": int(len(d_s)), "median_rmse": round(float(np.median(d_s)), 3),
                    "copy_share": round(float((d_s < thr).mean()), 4) if thr > 0 else None},
        "reference": {"n": int(len(d_r)), "median_rmse": round(med_r, 3), "threshold": round(thr, 3)},
        "train": {"n": int(len(train))},
        "ratio": round(float(np.median(d_s)) / med_r, 4) if med_r > 0 else None,
    }
    if thr == 0:
        out["note"] = (f"over {COPY_QUANTILE:.0%} of the reference renders repeat a training image pixel for pixel (a small "
                       "scene space): a copy cannot be told from a new draw, so copy_share is None")
    return out
