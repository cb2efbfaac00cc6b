"""The scene parser's reads spread over worker processes (``SceneParser(spec, workers=N)``).

One image's read is a pure function of the image and the parser (its caches hold only what the
same image gives again), so N processes give exactly the reads of one, in the images' order. The
parser holds Python's GIL for most of a read (per-region k-means, connected components, shape
fitting), so threads would add nothing: the images are cut into chunks (:func:`chunk_size`) and read by
a pool of spawned processes, each holding its own copy of the parser (sent once, when the pool
starts). The pool lives with the parser and is reused by its later reads; it ends with
:func:`close_pool`, when the parser is garbage-collected, or with the process (the workers die
with their parent, even on SIGKILL).

A call with fewer than :data:`MIN_PARALLEL` images reads in this process: starting a pool costs
about a second of imports per worker, more than reading a few dozen images.
"""

from __future__ import annotations

import pickle
import weakref

import numpy as np

from mosaic.executors import worker_processes
from mosaic.locks import die_with_parent

#: at most this many images per task sent to a worker (a task is one pickle of uint8 pixels there
#: and reads back); a call is cut into at least 16 tasks per worker (at least 4 images each), so
#: that the last tasks leave no worker idle for long
CHUNK = 32
#: fewer images than this in one call are read in this process
MIN_PARALLEL = 64

_parser = None  # the worker process's copy


def _start(blob: bytes) -> None:
    global _parser
    die_with_parent()
    _parser = pickle.loads(blob)


def _read_chunk(images: np.ndarray) -> list:
    return [_parser.parse(im) for im in images]


def _pool_of(parser):
    pool = getattr(parser, "_pool", None)
    if pool is None:
        from concurrent.futures import ProcessPoolExecutor
        from multiprocessing import get_context

        pool = ProcessPoolExecutor(max_workers=worker_processes(parser.workers), mp_context=get_context("spawn"), initializer=_start,
                                   initargs=(pickle.dumps(parser),))  # pickled without the pool, as workers=1
        parser._pool = pool
        weakref.finalize(parser, pool.shutdown, wait=False, cancel_futures=True)
    return pool


def read_in_processes(parser, images: np.ndarray) -> list:
    """``parser``'s :class:`~mosaic.evaluation.parser.Parse` of each image of uint8 ``[N, H, W, 3]``
    ``images`` (already checked), in order, read by ``parser.workers`` processes; in this process
    when there are fewer than :data:`MIN_PARALLEL` images or one worker."""
    if parser.workers <= 1 or len(images) < MIN_PARALLEL:
        return [parser.parse(im) for im in images]
    pool = _pool_of(parser)
    out: list = []
    step = chunk_size(len(images), parser.workers)
    for reads in pool.map(_read_chunk, [images[i:i + step] for i in range(0, len(images), step)]):
        out += reads
    return out


def chunk_size(n: int, workers: int) -> int:
    """Images per task for ``n`` images over ``workers`` processes: ``n / (16 workers)`` rounded
    up, within [4, :data:`CHUNK`]."""
    return max(4, min(CHUNK, -(-n // (16 * max(1, workers)))))


def close_pool(parser) -> None:
    """End ``parser``'s worker processes (a later parallel read starts new ones)."""
    pool = getattr(parser, "_pool", None)
    if pool is not None:
        parser._pool = None
        pool.shutdown(wait=True, cancel_futures=True)


__all__ = ["CHUNK", "MIN_PARALLEL", "chunk_size", "close_pool", "read_in_processes"]
