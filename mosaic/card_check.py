"""The dataset card (``README.md``) checked as HF reads it: :func:`card_problem`, called by
:func:`mosaic.verify.card_damage` in ``mosaic verify`` and in the quick check every reader runs.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from mosaic.errors import MosaicError
from mosaic.hf import CARD, card_yaml
from mosaic.io import read_bounded
from mosaic.records import spec_from_data

#: most bytes of a card read
CARD_LIMIT = 4 * 2**20


def card_problem(root: str | Path, man: dict) -> tuple[str, str] | None:
    """The card (``README.md``) as HF reads it: its whole YAML header (``configs``: the file patterns,
    features and the dataset's identity, which HF's cache key hashes, :func:`mosaic.hf.identity`;
    ``dataset_info``, whose features HF decodes the ``ClassLabel`` columns with) must be exactly
    what mosaic writes for this manifest. A card copied from another dataset, or from this folder
    before it was regenerated, would make ``datasets.load_dataset(DIR)`` serve that dataset's cached
    rows or read other files; a missing card makes HF guess the splits (``test_id`` and ``test_ood``
    merged) and take every file for data. Reads the card (at most :data:`CARD_LIMIT` bytes) and
    parses its front matter with huggingface_hub's ``DatasetCard``, as HF does. Returns None or
    ``(problem, detail)`` (``card``; ``link`` for a Parquet dataset's card, an imagefolder's link being
    named by the stray-file check); ``--repair`` (or a rerun of generate) writes the card again."""
    import yaml
    from huggingface_hub import DatasetCard

    root = Path(root)
    p = root / CARD
    if p.is_symlink():
        if man.get("storage", "imagefolder") != "parquet":
            return None  # named by mosaic.verify.stray_entries
        return ("link", "a symbolic link stands where the dataset's card belongs: it is never followed; "
                        "--repair (or a rerun of generate) writes the card in its place")
    if not p.exists():
        return ("card", "missing: datasets.load_dataset(DIR) would guess the splits (merging test_id and test_ood) "
                        "and read any file as data; --repair writes it")
    if p.is_dir():  # repair removes an empty folder there and refuses one with content (mosaic.repair.make_room)
        if any(p.iterdir()):
            return ("card", f"a folder that holds files stands where the dataset's card belongs: move {p} away (--repair never "
                            "deletes a folder with content), then --repair (or a rerun of generate) writes the card")
        return ("card", "an empty folder stands where the dataset's card belongs; --repair (or a rerun of generate) replaces "
                        "it with the card")
    why = None
    try:
        text = read_bounded(p, CARD_LIMIT).decode("utf-8")  # a regular file of at most CARD_LIMIT bytes
        # the header as HF finds it (huggingface_hub's own parser: its block ends at a `---` line with trailing
        # spaces or tabs, or \r line ends, where a plain split would read on), so mosaic checks what HF reads
        quiet = logging.getLogger("huggingface_hub.repocard")  # its 'metadata block was not found' warning: named below
        level, quiet.level = quiet.level, logging.ERROR
        try:
            head = DatasetCard(text, ignore_metadata_errors=False).data.to_dict()
        finally:
            quiet.setLevel(level)
        want = card_yaml(spec_from_data(man["spec"]), man, man.get("storage", "imagefolder"))
        if not head:
            why = ("HF finds no YAML header, or an empty one, in it (its front matter ends at the first line of three dashes, trailing spaces "
                   "allowed): HF would guess the splits, merging test_id and test_ood, and read any file as data")
        elif not isinstance(head, dict) or _configs_key(head.get("configs")) != _configs_key(want["configs"]):
            why = ("its configs (the files datasets.load_dataset reads and the dataset's identity, which HF's cache key hashes) "
                   "are not this dataset's: a card copied from another dataset, or from this folder before it was regenerated, "
                   "would serve that dataset's cached rows")
        elif {k: v for k, v in head.items() if k != "configs"} != {k: v for k, v in want.items() if k != "configs"}:
            why = ("its YAML header is not the one mosaic writes for this dataset (dataset_info's features, which HF decodes "
                   "the labels with, or another field was edited or added): HF would read the rows with it")
    except (OSError, ValueError, UnicodeDecodeError, yaml.YAMLError, RecursionError) as e:
        why = f"unreadable ({type(e).__name__}: {str(e)[:120]})"
    except MosaicError:
        return None  # the spec itself is refused: named by the fingerprint check
    return ("card", why + "; --repair (or a rerun of generate) writes it again") if why else None


def _configs_key(configs) -> object:
    """A card's ``configs`` with each config's ``data_files`` as split -> patterns (a manifest read
    back from disk lists its splits sorted: the order of the splits is no difference)."""
    if not isinstance(configs, list):
        return configs
    out = []
    for c in configs:
        if isinstance(c, dict) and isinstance(c.get("data_files"), list):
            files = c["data_files"]
            c = {**c, "data_files": sorted((json.dumps(d, sort_keys=True) for d in files))}
        out.append(c)
    return out
