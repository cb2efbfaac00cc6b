"""Loading a mosaic dataset folder with HuggingFace ``datasets``, checked first and cached by location.

Sits above :mod:`mosaic.verify` (it runs the quick check before every read) and :mod:`mosaic.hf`
(the card that makes the folder a HF dataset); ``datasets`` is imported only when a folder is loaded.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from mosaic.errors import DatasetError
from mosaic.io import output_dir_problem
from mosaic.locks import reading
from mosaic.verify import check_before_read, read_manifest_checked


def load_dataset(path: str | Path, **kwargs):
    """``datasets.load_dataset(path, **kwargs)`` that always gives this folder's own data, wherever it
    lies and whatever lay there before.

    HF's cache key for a local folder (``datasets`` 4-5, ``load.LocalDatasetModuleFactory``) is the
    folder's *name* plus a hash of its card (the ``configs`` patterns, features and description):
    neither the folder's location nor its files. The card states the dataset's
    :func:`mosaic.hf.identity`, so a regenerated or another dataset gets its own entry; but an
    imagefolder entry holds the *absolute paths* of the images, so a plain ``datasets.load_dataset`` of a moved folder gets the entry made
    at its old place: its images are read from there (FileNotFoundError, or, where another dataset
    of that name has been generated at the old place since, that dataset's images under this one's
    labels). This loader runs the quick check first (:func:`mosaic.verify.check_before_read`: the
    data is the manifest's, the card is the manifest's) and keys the cache by the folder's resolved
    location too: ``<cache_dir>/mosaic-by-location/<sha256(realpath)[:16]>`` under ``cache_dir``
    (default ``datasets.config.HF_DATASETS_CACHE``), where HF's own key (name + card identity) then
    tells the datasets that lie there apart.

    Args:
        path: a mosaic dataset folder (either storage form).
        **kwargs: passed to ``datasets.load_dataset`` (``split``, ``cache_dir``, ``download_mode``, ...);
            those that choose other files than the folder's own (:data:`REDIRECTING`: ``data_files``,
            ``data_dir``, ``revision``, ``storage_options``) are refused: the quick check vouches for
            this folder's files read through its card's patterns, not for what they would name.
    Returns:
        What ``datasets.load_dataset`` returns (a ``DatasetDict``, or a ``Dataset`` with ``split``).
    Raises:
        DatasetError: the folder is not a complete, undamaged mosaic dataset (each problem named, with the fix);
            its path holds a character HF reads as a glob (:func:`refuse_glob_path`); HF finds no data file;
            a keyword of :data:`REDIRECTING`.
        ImportError: ``datasets`` is not installed.
    """
    if kwargs.get("streaming"):  # its files would be read while iterated, after the lock: another dataset's images could come
        raise DatasetError([("streaming", "streaming=True is refused: the files would be read while the dataset is iterated, after "
                             "the quick check and without the dataset's lock; load it whole, or stream it with "
                             "mosaic.stream.StreamingDataset")])
    bad = [k for k in REDIRECTING if kwargs.get(k) is not None]
    if bad:
        raise DatasetError([(k, f"{k}={kwargs[k]!r} is refused: it would make HuggingFace datasets read other files than "
                             f"those of {str(path)!r} (the quick check vouches for the folder's files, read through its card's "
                             "patterns); load the other dataset folder by its own path, or use datasets.load_dataset "
                             "directly for files that are not a mosaic dataset") for k in bad])
    import datasets

    root = Path(path)
    read_manifest_checked(root)  # a dataset at all before a lock file is made beside it
    where = os.path.realpath(root)
    refuse_glob_path(where, root)
    base = kwargs.pop("cache_dir", None) or datasets.config.HF_DATASETS_CACHE
    cache = Path(base) / "mosaic-by-location" / hashlib.sha256(where.encode("utf-8", "surrogateescape")).hexdigest()[:16]
    problem = output_dir_problem(cache)  # HF writes its cache there: never into a dataset (this one or another), a run, a file
    if problem:
        raise DatasetError([("cache_dir", f"{str(base)!r}: the cache folder {cache} {problem}")])
    try:
        with reading(root, DatasetError):  # no `generate --overwrite` between the check and HF's last read
            check_before_read(root)
            return _embedded(datasets.load_dataset(where, cache_dir=str(cache), **kwargs))
    except FileNotFoundError as e:  # HF found no file of a card pattern: named, never a raw traceback
        raise DatasetError(f"{root}: HuggingFace datasets found no data file ({str(e)[:200]}); check the folder with "
                           f"`mosaic verify {root}`, and rewrite its card with `mosaic verify {root} --repair`") from None


#: ``datasets.load_dataset`` keywords that choose which files are read (other files than the folder's
#: own, unchecked, or another version of them): refused by :func:`load_dataset`
REDIRECTING = ("data_files", "data_dir", "revision", "storage_options")

#: characters HF ``datasets`` reads as a glob in a data file's path (``fsspec`` patterns)
GLOB_CHARS = "[]*?"


def refuse_glob_path(where: str, root: Path | str | None = None) -> None:
    """Refuse a dataset folder whose resolved path holds a character HF reads as a glob pattern, or
    ``::``, which fsspec reads as a chain of URLs (``data/x::y`` read the files of ``data/x``).

    HF joins the card's file patterns to the folder's path and expands the *whole* path as a glob
    (``datasets`` 4-5, ``data_files.resolve_pattern``): a folder ``data/br[x]`` reads the files of
    a sibling ``data/brx``, ``data/st*r`` those of every matching sibling, merged, without a word.

    Raises:
        DatasetError: naming the characters, the path and the fix (rename or move the folder).
    """
    if "::" in str(where):  # fsspec's URL chain: HF reads "data/x::y" as the folder data/x (another dataset there)
        raise DatasetError(f"{root if root is not None else where}: its path {where} holds '::', which HuggingFace datasets "
                           "(fsspec) reads as a chain of URLs: it would load the files of the folder before '::' (data/x for "
                           "data/x::y), another dataset where one lies there: rename the folder, or move it to a path without "
                           "'::', then load it again (mosaic's own readers read it as it is)")
    bad = sorted({c for c in str(where) if c in GLOB_CHARS})
    if bad:
        raise DatasetError(f"{root if root is not None else where}: its path {where} holds {' '.join(repr(c) for c in bad)}, which "
                           "HuggingFace datasets reads as a glob pattern (it would load the files of other folders whose names "
                           "match, e.g. data/brx for data/br[x]): rename the folder, or move it to a path without "
                           f"{' '.join(GLOB_CHARS)}, then load it again (mosaic's own readers, MosaicDataset and "
                           "StreamingDataset, read it as it is)")


def _embedded(ds):
    """``ds`` (a ``Dataset`` or ``DatasetDict``) with every image and mask held as bytes in HF's cache,
    read under the dataset's lock: an imagefolder entry stores each image by its *path*, decoded
    when accessed, so a ``generate --overwrite`` after the load gave the old labels with the new
    images. Embedded (``datasets.table.embed_table_storage``, as ``push_to_hub`` does), the rows
    are the files the quick check read, wherever the folder goes later. A Parquet dataset's
    images are bytes already (nothing to embed)."""
    from functools import partial

    import datasets
    from datasets.table import embed_table_storage

    if isinstance(ds, datasets.DatasetDict):
        return datasets.DatasetDict({k: _embedded(v) for k, v in ds.items()})
    if not any(isinstance(f, datasets.Image) for f in ds.features.values()):
        return ds
    fmt = ds.format
    out = ds.with_format("arrow").map(partial(embed_table_storage, remote_files=False), batched=True, batch_size=1000,
                                      desc="embedding the images")
    return out.with_format(fmt["type"], columns=fmt["columns"], output_all_columns=fmt["output_all_columns"], **fmt["format_kwargs"])
