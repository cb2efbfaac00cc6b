"""Where generation tasks run: this process, a local process pool, or Ray tasks.

Every executor has the same four members, which the writers use to keep a bounded number of tasks
in flight and to take their results in submission order:

- ``submit(fn, *args) -> handle``: start ``fn(*args)`` (``fn`` must be importable by the workers);
- ``result(handle)``: wait for it and return its value (re-raising its exception);
- ``window``: how many tasks to keep in flight;
- ``close(cancel=False)``: release the workers.

A task is a pure function of its arguments, so the bytes written do not depend on the executor.
"""

from __future__ import annotations

from mosaic.errors import DatasetError
from mosaic.locks import die_with_parent

BACKENDS = ("local", "ray")


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity mask; ``os.cpu_count()`` where there is none)."""
    import os

    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


def worker_processes(workers: int, tasks: int | None = None) -> int:
    """The processes to start for ``--workers workers``: at most this machine's usable CPUs
    (:func:`usable_cpus`) and, given ``tasks``, at most one per task. Rendering and reading are CPU
    work, so more processes than CPUs end no sooner: ``--workers 1024`` on a 2-core machine spawned a
    process (about 100 MB each) per task in flight. The output does not depend on the number."""
    n = min(max(1, int(workers)), usable_cpus())
    return max(1, min(n, int(tasks))) if tasks is not None else n


def workers_note(workers: int) -> str | None:
    """The note a command prints when ``--workers`` asks for more processes than :func:`worker_processes` starts."""
    n = worker_processes(workers)
    if n >= workers:
        return None
    return (f"--workers {workers}: using {n} process{'es' if n > 1 else ''}, this machine's usable CPUs (more would end no "
            "sooner and cost memory each; the output is the same for any number)")


class _Deferred:
    """A call run when its result is asked for (in this process, in submission order)."""

    def __init__(self, fn, args):
        self.fn, self.args = fn, args

    def result(self):
        return self.fn(*self.args)


class LocalExecutor:
    """``workers`` spawned processes (``concurrent.futures``), or this process when ``workers`` is 1
    (then a task runs when its result is asked for, so an interruption leaves later tasks undone)."""

    def __init__(self, workers: int = 1):
        self.pool = None
        workers = worker_processes(workers)  # never more processes than CPUs
        if workers > 1:
            from concurrent.futures import ProcessPoolExecutor
            from multiprocessing import get_context

            # workers end with this process, even when it is killed with SIGKILL (no orphans)
            self.pool = ProcessPoolExecutor(max_workers=workers, mp_context=get_context("spawn"), initializer=die_with_parent)
        self.window = max(2, 2 * workers)

    def submit(self, fn, *args):
        if self.pool is None:
            return _Deferred(fn, args)
        return self.pool.submit(fn, *args)

    @staticmethod
    def result(handle):
        return handle.result()

    def close(self, cancel: bool = False) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=not cancel, cancel_futures=cancel)
            self.pool = None


class RayExecutor:
    """Ray tasks (one CPU each) on a running cluster (``address``: ``auto``, ``ray://host:10001``, or
    ``host:6379``) or, without ``address``, on a local Ray instance of ``workers`` CPUs started here
    and shut down by :meth:`close`.

    Raises:
        DatasetError: Ray is not installed, or the cluster cannot be reached.
    """

    def __init__(self, workers: int = 1, address: str | None = None):
        try:
            import ray
        except ImportError:
            raise DatasetError([("--backend", "ray needs Ray: pip install 'mosaic[ray]' (or use --backend local)")]) from None
        self.ray = ray
        self.started = False
        if not ray.is_initialized():
            kw = {"address": address} if address else {"num_cpus": worker_processes(workers)}
            try:
                ray.init(include_dashboard=False, log_to_driver=False, **kw)
            except (ConnectionError, RuntimeError, ValueError) as e:
                raise DatasetError([("--address", f"cannot reach the Ray cluster at {address!r}: {e}")]) from None
            self.started = True
        cpus = int(ray.cluster_resources().get("CPU", workers)) or 1
        self.window = max(2, 2 * cpus)
        self._remote: dict = {}

    def submit(self, fn, *args):
        if fn not in self._remote:
            self._remote[fn] = self.ray.remote(num_cpus=1)(fn)
        return self._remote[fn].remote(*args)

    def result(self, handle):
        try:
            return self.ray.get(handle)
        except self.ray.exceptions.RayTaskError as e:  # re-raise the task's own exception
            cause = e.as_instanceof_cause() if hasattr(e, "as_instanceof_cause") else e
            raise cause from None

    def close(self, cancel: bool = False) -> None:
        if self.started:
            self.ray.shutdown()
            self.started = False


def check_backend(backend: str) -> str:
    """Return ``backend`` when known; raise DatasetError naming the choices otherwise."""
    if backend not in BACKENDS:
        raise DatasetError([("--backend", f"unknown backend {backend!r}: use one of {', '.join(BACKENDS)}")])
    return backend


def make_executor(backend: str = "local", workers: int = 1, address: str | None = None):
    """An executor for ``backend`` (``local`` or ``ray``). ``address`` only applies to Ray.

    Raises:
        DatasetError: an unknown backend, ``--address`` without Ray, Ray missing or unreachable.
    """
    check_backend(backend)
    if backend == "local":
        if address:
            raise DatasetError([("--address", f"--address {address!r} applies to --backend ray only: drop it or add --backend ray")])
        return LocalExecutor(workers)
    return RayExecutor(workers, address)
