"""A lab run's folder: its files, opening one (a new run, a resume, or a finished run; a rerun
with another config or on a changed dataset is refused), the run's id that every checkpoint
records, the training and validation logs, ``metrics.json`` and ``DONE``. The training loop
(:mod:`mosaic.lab.loop`) and the run driver (:mod:`mosaic.lab.run`) write it; ``mosaic sample``
and ``mosaic analyze`` read it.

A run is a folder::

    RUN/config.yaml              the resolved config (a rerun with another config is refused)
    RUN/dataset.json             dataset path, spec fingerprint, split counts, manifest hash
    RUN/dataset_manifest.json    a copy of the dataset's manifest;  RUN/dataset -> the dataset (link)
    RUN/run.json                 the run's id (each checkpoint records it: another run's checkpoint is refused)
    RUN/checkpoints/checkpoint-NNNNNNN/   model, optimizer, LR schedule, EMA, RNG (mosaic.lab.checkpoint)
                                 + trainer_state.json (step, best value, time)
    RUN/best/  RUN/final/        exported weights (EMA when enabled): best on val, and last
    RUN/log.jsonl  RUN/log.csv   training rows (step, loss, lr, grad_norm, images_per_s, time_s)
    RUN/val.jsonl                validation rows;  RUN/tensorboard/ with training.tensorboard
    RUN/metrics.json             the run's summary;  RUN/DONE  written last: a rerun is a no-op
"""

from __future__ import annotations

import csv
import io
import json
import os
import stat
import time
from pathlib import Path

import yaml

from mosaic.errors import DatasetError, TrainingError
from mosaic.io import MAX_JSON_BYTES, atomic_write, file_kind, loads_json, open_append, read_bounded
from mosaic.lab.config import config_diff
from mosaic.lab.data import manifest_fingerprint
from mosaic.overrides import load_yaml_text
from mosaic.verify import MANIFEST_LIMIT, check_before_read

LOG_FIELDS = ("step", "loss", "lr", "grad_norm", "images_per_s", "time_s")


#: the most bytes of a run's JSON-lines log mosaic reads (a row a step: ~200 bytes, so millions of steps)
MAX_LOG_BYTES = 1 << 30


def final_loss(log: list[dict], steps: int) -> float | None:
    """A run's final loss as ``metrics.json`` records it: the mean ``loss`` of the log rows of the last 10 % of
    ``steps`` (the last row alone when none lies there), or None for an empty log."""
    recent = [r for r in log if r["step"] > 0.9 * steps] or log[-1:]
    return sum(r["loss"] for r in recent) / len(recent) if recent else None


def _read_jsonl_rows(path: Path) -> list[dict]:
    """The rows of a run's JSON-lines log (``log.jsonl``, ``val.jsonl``): ``[{"step": int, ...}]``,
    [] when there is none. A last line without its newline is an append cut short (the run was killed,
    or the disk filled, while writing it): not a row yet, left out (a resume rewrites the log from its
    rows up to the checkpoint), where it made every rerun of the run refuse the log.

    Raises:
        TrainingError: a line that is not a JSON object with an integer ``step`` (a damaged or
            foreign file), naming the file, the line and the fix; never a traceback.
    """
    if not path.is_file():
        return []
    try:
        data = read_bounded(path, MAX_LOG_BYTES)
        text = data[:data.rfind(b"\n") + 1].decode("utf-8")  # whole lines only: a torn last append is no row
    except (OSError, ValueError) as e:  # unreadable, not a regular file, too large, not UTF-8
        raise TrainingError(f"{path} cannot be read ({type(e).__name__}: {str(e)[:80]}): the run's log is damaged; "
                            "delete the run folder (or give another --out) to start the run afresh") from None
    rows = []
    for k, line in enumerate(text.split("\n")[:-1], 1):
        if not line.strip():
            continue
        try:
            row = loads_json(line)
        except (ValueError, RecursionError):
            row = None
        if not isinstance(row, dict) or not isinstance(row.get("step"), int) or isinstance(row.get("step"), bool):
            raise TrainingError(f"{path} line {k} is not a log row (a JSON object with an integer step): {line[:60]!r}; "
                                "the run's log is damaged: delete that line (resuming truncates the log to the checkpoint "
                                "anyway), or delete the run folder to start afresh")
        rows.append(row)
    return rows


def _read_run_file(path: Path) -> bytes:
    """The bytes of a run's record (``config.yaml``, ``dataset.json``, ``run.json``, ``metrics.json``):
    a regular file of at most :data:`mosaic.io.MAX_JSON_BYTES`, opened ``O_NONBLOCK`` so that a FIFO
    standing at the name is refused instead of blocking the reader forever.

    Raises:
        FileNotFoundError: missing; ValueError: not a regular file, or too large."""
    return read_bounded(path, MAX_JSON_BYTES)


def _yaml(text: str):
    """A run's ``config.yaml`` parsed as every user YAML file is (:func:`mosaic.overrides.load_yaml_text`:
    safe, aliases bounded, no key twice): a "billion laughs" config was expanded when compared on resume."""
    return load_yaml_text(text, "config.yaml", lambda where, msg: ValueError(msg))


#: the files of a run folder that are mosaic's own (config.yaml is checked as the run's marker): a folder or FIFO at one is damage
OWN_FILES = ("dataset.json", "dataset_manifest.json", "run.json", "log.jsonl", "log.csv", "val.jsonl", "metrics.json", "DONE")


class RunFolder:
    """The files of one run (see the module docstring). Only the main process writes."""

    def __init__(self, root: str | Path):
        self.root = Path(root)
        self.config = self.root / "config.yaml"
        self.dataset = self.root / "dataset.json"
        self.checkpoints = self.root / "checkpoints"
        self.best = self.root / "best"
        self.final = self.root / "final"
        self.log_jsonl = self.root / "log.jsonl"
        self.log_csv = self.root / "log.csv"
        self.val_jsonl = self.root / "val.jsonl"
        self.metrics = self.root / "metrics.json"
        self.done = self.root / "DONE"
        self.identity = self.root / "run.json"

    def run_id(self) -> str | None:
        """This run's id (``run.json``, made when the run starts): every checkpoint records it, and a
        checkpoint with another id (copied from another run) is refused. None for a run folder of an
        older mosaic that has none yet.

        Raises:
            TrainingError: ``run.json`` is damaged (names the file and the fix)."""
        if not os.path.lexists(self.identity):
            return None
        if self.identity.is_symlink() or not self.identity.is_file():  # a FIFO, folder or link is no run id: never "no id yet"
            raise TrainingError(f"{self.identity} is damaged (not a regular file: a link, folder, FIFO or device): restore it, "
                                f"or delete the run folder {self.root} to start over")
        rid = self._read(self.identity, loads_json).get("id")  # a key given twice is damage (attack round 26)
        if not isinstance(rid, str) or not 8 <= len(rid) <= 64 or not rid.isalnum():
            raise TrainingError(f"{self.identity} is damaged (no run id): restore it, or delete the run folder {self.root} to start over")
        return rid

    def _write_identity(self) -> None:
        import uuid

        atomic_write(self.identity, json.dumps({"id": uuid.uuid4().hex}) + "\n")

    # -- state ----------------------------------------------------------------------------------
    def is_done(self) -> bool:
        return self.done.is_file()

    def read_config(self) -> dict:
        if not self.root.is_dir():
            if self.root.exists():
                raise TrainingError(f"{self.root} is a file, not a run folder: give the folder `mosaic train ...` wrote")
            raise TrainingError(f"run folder {self.root} does not exist (train one with `mosaic train ...`)")
        if not self.config.is_file():
            raise TrainingError(f"{self.root} is not a run folder: {self.config.name} is missing (train one with `mosaic train ...`)")
        return self._read(self.config, _yaml)

    def read_dataset(self) -> dict:
        return self._read(self.dataset, loads_json)

    def _read(self, path: Path, parse) -> dict:
        """A run file parsed as a mapping; TrainingError naming the file and the fix when damaged."""
        try:
            data = parse(_read_run_file(path).decode("utf-8"))
        except FileNotFoundError:
            raise TrainingError(f"{path} is missing: {self.root} is not a whole run folder; give another --out, or delete the folder to start over") from None
        except Exception as e:  # noqa: BLE001 - unreadable bytes, bad JSON or YAML
            raise TrainingError(f"{path} is damaged ({type(e).__name__}: {str(e).splitlines()[0][:120] if str(e) else ''}): restore it, "
                                f"or delete the run folder {self.root} to start over (or give another --out)") from None
        if not isinstance(data, dict):
            raise TrainingError(f"{path} is damaged (not a mapping): restore it, or delete the run folder {self.root} to start over")
        return data

    def dataset_root(self) -> Path:
        """The root of the run's dataset, checked against the fingerprint recorded when the run
        started and by the quick check every reader runs (:func:`mosaic.verify.check_before_read`:
        damaged or edited records, stray files, links), for sampling or analysing a finished run.

        Raises:
            DatasetError: the dataset is gone (no ``manifest.json``), changed since the run started,
                or damaged (each problem named, with the fix).
        """
        rec = self.read_dataset()
        bad = [k for k in ("path", "fingerprint", "manifest_sha256") if not isinstance(rec.get(k), str) or not rec[k]]
        if bad:  # a field missing or of another type was a KeyError / TypeError traceback
            raise TrainingError(f"{self.dataset} is damaged ({bad[0]}: {str(rec.get(bad[0]))[:60]!r} is not the string mosaic "
                                f"writes): restore it, or train the run again into a new --out")
        self._check_dataset_record(rec)
        root = Path(rec["path"])
        if not (root / "manifest.json").is_file():
            raise DatasetError(f"the dataset of run {self.root} is gone: {root} holds no manifest.json (regenerate it, or restore it)")
        cur = manifest_fingerprint(root)
        if cur["fingerprint"] != rec["fingerprint"] or cur["manifest_sha256"] != rec["manifest_sha256"]:
            raise DatasetError(f"the dataset {root} changed since run {self.root} was trained (fingerprint {rec['fingerprint']} -> "
                               f"{cur['fingerprint']}): restore it, or train a new run")
        try:  # the records the run samples or probes are read from it: damage is named, never used
            check_before_read(root)
        except DatasetError as e:
            raise DatasetError([("", f"the dataset of run {self.root}:")] + e.problems, source=str(root)) from None
        return root

    def _manifest_copy_sha256(self) -> str | None:
        """The sha256 of the run's copy of its dataset's manifest (``dataset_manifest.json``), or None when it is
        missing or unreadable (not a regular file, over the JSON bound)."""
        import hashlib

        try:
            return hashlib.sha256(read_bounded(self.root / "dataset_manifest.json", MAX_JSON_BYTES)).hexdigest()
        except (OSError, ValueError):
            return None

    def _check_dataset_record(self, rec: dict) -> None:
        """``dataset.json`` must name the dataset whose manifest the run copied when it started
        (``dataset_manifest.json``, byte for byte: its sha256 is the record's ``manifest_sha256``). A
        record rewritten to name another dataset of the same concepts (another holdout) had ``sample``
        write that dataset's held-out flags and ``analyze`` probe it (attack round 23).

        Raises:
            TrainingError: naming both files and the fix."""
        copy_path = self.root / "dataset_manifest.json"
        copy = self._manifest_copy_sha256()
        if copy != rec["manifest_sha256"]:
            what = "is missing or unreadable" if copy is None else f"has sha256 {copy[:12]}, not {rec['manifest_sha256'][:12]}"
            raise TrainingError([(str(self.dataset), f"names the dataset {rec['path']}, but the run's copy of the manifest it was "
                                  f"trained on ({copy_path.name}) {what}: nothing says the run was trained on that dataset. "
                                  "Restore both files from the run's backup; a finished run of an older mosaic without the copy "
                                  "gets it when its training command is run again (a no-op otherwise)")])

    def checkpoint_list(self) -> list[tuple[int, Path]]:
        """Complete checkpoints ``[(step, dir)]``, oldest first (``.tmp`` ones are unfinished). A
        checkpoint name that is a symbolic link never counts: a run resumes only from folders of
        its own, never from files elsewhere that a link points at (nor does ``checkpoints/`` itself as a link)."""
        if self.checkpoints.is_symlink() or not self.checkpoints.is_dir():  # a link at checkpoints/: another folder's, never resumed from
            return []
        out = []
        for d in self.checkpoints.iterdir():
            # unfinished (.tmp) and damaged (.damaged) checkpoints do not count
            if not d.is_symlink() and d.is_dir() and d.name.startswith("checkpoint-") and d.name[11:].isascii() and d.name[11:].isdigit() and (d / "trainer_state.json").is_file():
                out.append((int(d.name.split("-")[1]), d))
        return sorted(out)

    def latest_checkpoint(self) -> Path | None:
        cks = self.checkpoint_list()
        return cks[-1][1] if cks else None

    # -- opening ---------------------------------------------------------------------------------
    def open(self, config: dict, dataset_root: Path, is_main: bool) -> str:
        """Start or continue a run: ``"new"``, ``"resume"`` or ``"done"``.

        Raises:
            TrainingError: the folder holds a run of another config, or is a non-empty non-run folder.
            DatasetError: the dataset's manifest changed since the run started (fingerprint check).
        """
        current = manifest_fingerprint(dataset_root)
        if self.config.is_file():
            old = self._read(self.config, _yaml)
            # where the run and its dataset lie is no difference (a moved folder resumes): the dataset's identity is checked below
            diff = [d for d in config_diff(old, config) if d not in ("out", "dataset.path")]
            if diff:
                raise TrainingError(
                    f"run folder {self.root} holds a run with another config (differs in: {', '.join(diff)}); "
                    "give another --out, or delete the folder to start over"
                )
            self._check_own_files()
            if not os.path.lexists(self.dataset):
                self._restore_dataset_record(current, is_main)
            else:  # read whatever stands there: a damaged record is refused here, as `mosaic analyze` refuses it
                rec = self.read_dataset()
                if rec.get("fingerprint") != current["fingerprint"] or rec.get("manifest_sha256") != current["manifest_sha256"] \
                        or rec.get("splits") != current["splits"]:
                    raise DatasetError(
                        f"the dataset {dataset_root} changed since run {self.root} started (spec fingerprint "
                        f"{rec.get('fingerprint')} -> {current['fingerprint']}, manifest sha256 {str(rec.get('manifest_sha256'))[:12]} -> "
                        f"{current['manifest_sha256'][:12]}): the run's checkpoints were trained on other data. Restore the dataset, "
                        "or start a new run (another --out)"
                    )
                if is_main and rec.get("path") != current.get("path"):  # the same dataset, moved: the run records where it is now
                    atomic_write(self.dataset, json.dumps(current, indent=2) + "\n")
            if is_main and not self.identity.exists() and not self.identity.is_symlink():  # a run of an older mosaic: it gets its id now
                self._write_identity()
            if is_main and not os.path.lexists(self.root / "dataset_manifest.json"):  # a run started by a mosaic that stopped before it
                atomic_write(self.root / "dataset_manifest.json", _manifest_bytes(dataset_root, current))
            return "done" if self.is_done() else "resume"
        if self.root.exists() and any(self.root.iterdir()):
            raise TrainingError(f"{self.root} exists, is not empty and holds no run (config.yaml missing): give an empty or new --out")
        if is_main:
            manifest = _manifest_bytes(dataset_root, current)  # read before the run has a file: a refusal leaves no half run
            self.root.mkdir(parents=True, exist_ok=True)
            atomic_write(self.config, yaml.safe_dump(config, sort_keys=False))
            self._write_identity()
            atomic_write(self.dataset, json.dumps(current, indent=2) + "\n")
            atomic_write(self.root / "dataset_manifest.json", manifest)
            link = self.root / "dataset"
            if not link.exists() and not link.is_symlink():
                try:
                    link.symlink_to(Path(dataset_root).resolve(), target_is_directory=True)
                except OSError:  # filesystems without symlinks: dataset.json still names the path
                    pass
        return "new"

    def _check_own_files(self) -> None:
        """Refuse a resume (or a rerun) of a run whose own files (:data:`OWN_FILES`) are damaged in a way no rewrite
        may undo: a folder, FIFO, socket or device standing at one's name. Such a run trained on and wrote DONE, or
        stopped after training at the first write of that file, and `mosaic analyze` refused it then; it is never
        removed (what is inside is not mosaic's to delete). A link is left to the writers, which replace it."""
        for name in OWN_FILES:
            p = self.root / name
            try:
                st = os.lstat(p)
            except FileNotFoundError:
                continue
            if not (stat.S_ISREG(st.st_mode) or stat.S_ISLNK(st.st_mode)):
                kind = "a folder" if stat.S_ISDIR(st.st_mode) else file_kind(st.st_mode)
                raise TrainingError([(str(p), f"is damaged: {kind} stands where run {self.root} keeps this file; move it away "
                                      "(mosaic never deletes it) and restore the file, or delete the run folder (or give "
                                      "another --out) to start over")])

    def _restore_dataset_record(self, current: dict, is_main: bool) -> None:
        """A resume whose ``dataset.json`` is missing: written again when it can be exactly, i.e. when the run's copy of
        the manifest it started on (``dataset_manifest.json``) is byte for byte the dataset's manifest now (the record
        holds nothing but what :func:`mosaic.lab.data.manifest_fingerprint` reads from that manifest and the path);
        otherwise refused, since nothing then says that the checkpoints were trained on this dataset."""
        if self._manifest_copy_sha256() != current["manifest_sha256"]:
            raise TrainingError([(str(self.dataset), f"is missing, and {self.root / 'dataset_manifest.json'} is missing or "
                                  "not the dataset's manifest now, so nothing says the run's checkpoints were trained on this "
                                  "dataset: restore dataset.json, or delete the run folder (or give another --out) to start over")])
        if is_main:
            atomic_write(self.dataset, json.dumps(current, indent=2) + "\n")

    # -- logs ------------------------------------------------------------------------------------
    def append_log(self, row: dict) -> None:
        """One training row appended to ``log.jsonl`` and ``log.csv``, each opened never through a link
        (:func:`mosaic.io.open_append`: a link planted at a log's name is replaced, not grown)."""
        with open_append(self.log_jsonl) as f:
            f.write((json.dumps(row) + "\n").encode())
        with open_append(self.log_csv) as f:
            buf = io.StringIO(newline="")
            w = csv.DictWriter(buf, fieldnames=LOG_FIELDS, extrasaction="ignore")
            if os.fstat(f.fileno()).st_size == 0:  # a new file (or one put in place of a link): its header first
                w.writeheader()
            w.writerow(row)
            f.write(buf.getvalue().encode())

    def append_val(self, row: dict) -> None:
        with open_append(self.val_jsonl) as f:
            f.write((json.dumps(row) + "\n").encode())

    def read_log(self) -> list[dict]:
        return _read_jsonl_rows(self.log_jsonl)

    def read_val(self) -> list[dict]:
        return _read_jsonl_rows(self.val_jsonl)

    def truncate_logs(self, step: int) -> None:
        """Drop log rows after ``step`` (written after the checkpoint a resumed run starts from). Each
        log is written whole through the atomic writer: an interruption leaves the old log, never
        none (unlinking the logs and appending the kept rows again lost them all when killed between)."""
        rows = [r for r in self.read_log() if r["step"] <= step]
        vals = [r for r in self.read_val() if r["step"] <= step]
        buf = io.StringIO(newline="")
        w = csv.DictWriter(buf, fieldnames=LOG_FIELDS, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
        for p, text in ((self.log_jsonl, "".join(json.dumps(r) + "\n" for r in rows)), (self.log_csv, buf.getvalue()),
                        (self.val_jsonl, "".join(json.dumps(r) + "\n" for r in vals))):
            if text or p.exists() or p.is_symlink():
                atomic_write(p, text)

    def write_metrics(self, metrics: dict) -> None:
        atomic_write(self.metrics, json.dumps(metrics, indent=2, sort_keys=True, default=str) + "\n")

    def mark_done(self) -> None:
        atomic_write(self.done, time.strftime("%Y-%m-%dT%H:%M:%S") + "\n")


def _manifest_bytes(dataset_root: Path, current: dict) -> bytes:
    """The dataset's ``manifest.json`` as :func:`mosaic.lab.data.manifest_fingerprint` digested it (``current``), for
    the run's own copy (``dataset_manifest.json``, which ``mosaic evaluate RUN/samples/X`` reads the spec from). Read
    as data, not as a file of mosaic's own: a dataset copied with ``cp -al`` is hard links throughout and is trained
    on (it was refused after the run's first files were written, attack round 19).

    Raises:
        DatasetError: the manifest changed since it was digested a moment before (a generate racing the run)."""
    import hashlib

    data = read_bounded(Path(dataset_root) / "manifest.json", MANIFEST_LIMIT)
    if hashlib.sha256(data).hexdigest() != current["manifest_sha256"]:
        raise DatasetError(f"{Path(dataset_root) / 'manifest.json'} changed while the run started (another `mosaic generate` "
                           "writing the dataset?): wait for it to finish, then rerun")
    return data
