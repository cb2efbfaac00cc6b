"""Names in a spec: what may name a concept or a value (a colour, size, shape or relation name, a
concept's value). A name is written into every record, caption, card and metric and compared by
people by eye, so it must be one text only (:func:`name_problem`); :mod:`mosaic.grammar` checks every
name of a spec with :func:`_names_problem` whenever a spec is parsed, a manifest's stored spec
included (docs/integrity.md, "Names in a spec").
"""

from __future__ import annotations

import unicodedata

MAX_NAME = 200             # characters of a concept name or a value name

#: keys the evaluation tables put beside the concepts' own (``{concept: accuracy, "joint": ..., "n": ...}``,
#: ``cells.<combination>.held_out``): a concept so named would have its accuracy overwritten by the joint one
#: words the evaluation tables and a sweep's results columns use beside the concepts' own (``seen.joint``, ``held_out.quality``,
#: ``held_out.raw.<concept>``, ``seen.unreadable``): a concept of one of these names had its column overwritten (``quality``,
#: attack round 30)
RESERVED_CONCEPTS = frozenset({"joint", "n", "held_out", "seen", "overall", "quality", "raw", "unreadable", "accuracy"})


def _scripts(text: str) -> set[str]:
    """The scripts of the letters of ``text`` (the first word of each letter's Unicode name: LATIN,
    CYRILLIC, GREEK, ...; Han, kana and hangul count as one, as they are written together)."""
    out = set()
    for ch in text:
        if unicodedata.category(ch).startswith("L"):
            word = unicodedata.name(ch, "UNKNOWN").split(" ")[0]
            out.add("CJK" if word in ("CJK", "HIRAGANA", "KATAKANA", "HANGUL", "KANGXI") else word)
    return out


def name_problem(text: str, concept: bool = False) -> str | None:
    """Why ``text`` cannot name a concept (``concept``) or a value (a colour, size, shape or relation
    name, a concept's value), or None. A name is written into every record, caption, card and
    metric, and shown to people who compare it with others by eye, so it must be one text only:
    Unicode NFC (``"café"`` composed and decomposed are two strings that look one), no control,
    format or invisible characters (a zero-width space, a right-to-left override that shows
    ``red`` for ``der``), no space but single inner ones, letters of one script (a Cyrillic ``е`` in
    ``rеd``), at most :data:`MAX_NAME` characters, no ``|`` (the separator of a combination's key:
    ``x|y`` + ``z`` and ``x`` + ``y|z`` would be one cell). A concept name is also no path or field
    path (no ``/``, ``\\``, ``.``, space) and none of :data:`RESERVED_CONCEPTS`."""
    if not text:
        return "is empty"
    if len(text) > MAX_NAME:
        return f"has {len(text):,} characters, more than {MAX_NAME}"
    bad = [ch for ch in text if unicodedata.category(ch)[0] in "CZ" and ch != " "]
    if bad:
        return (f"holds U+{ord(bad[0]):04X}{(' ' + unicodedata.name(bad[0], '')).rstrip()}, a control, format or "
                "invisible character: it makes names that look alike differ (or reverse what is shown)")
    if text != text.strip() or "  " in text:
        return "has a leading, trailing or double space"
    if not unicodedata.is_normalized("NFC", text):
        return ("is not in Unicode NFC form (a letter written decomposed, e.g. e + a combining accent): write it composed, "
                f"{unicodedata.normalize('NFC', text)!r}")
    if len(sc := _scripts(text)) > 1:
        return f"mixes letters of {', '.join(sorted(sc))} (a look-alike letter of another script)"
    if "|" in text:
        return "holds '|', the separator of a combination's key (two combinations would share one cell)"
    if concept:
        if any(c in text for c in "/\\. "):
            return "holds '/', '\\', '.' or a space: a concept name is a field name (concepts.NAME) and never a path"
        if text in RESERVED_CONCEPTS:
            return (f"is one of {sorted(RESERVED_CONCEPTS)}, which the evaluation tables use beside the concepts' own "
                    "accuracies (its accuracy would be overwritten)")
    return None


#: letters of the Cyrillic and Greek alphabets drawn like a Latin letter (after case folding; from Unicode's
#: confusables for those alphabets): a name written wholly in one of them (a Cyrillic ``асе``) passes the one-script
#: rule, so two names are compared by their :func:`skeleton`
_LOOKALIKE = str.maketrans({
    # Cyrillic
    "а": "a", "в": "b", "с": "c", "ԁ": "d", "е": "e", "һ": "h", "н": "h", "і": "i", "ј": "j", "к": "k", "ӏ": "l",
    "м": "m", "о": "o", "р": "p", "ԛ": "q", "ѕ": "s", "т": "t", "у": "y", "ԝ": "w", "х": "x", "ү": "y", "ԍ": "g",
    # Greek
    "α": "a", "β": "b", "ε": "e", "ζ": "z", "η": "h", "ι": "i", "κ": "k", "μ": "m", "ν": "v", "ο": "o", "ρ": "p",
    "τ": "t", "υ": "u", "χ": "x", "ϲ": "c", "ϳ": "j",
})


def skeleton(text: str) -> str:
    """What ``text`` looks like: Unicode compatibility form (NFKC: a full-width ``ｒｅｄ`` is ``red``, a
    ligature ``ﬁ`` is ``fi``), case folded, and each Cyrillic or Greek letter drawn like a Latin one
    written as that letter (:data:`_LOOKALIKE`). Two names of one list with one skeleton are one
    name to a reader."""
    return unicodedata.normalize("NFKC", text).casefold().translate(_LOOKALIKE)


def _names_problem(names, what: str, concept: bool = False, known=()) -> str | None:
    """The first name of ``names`` (strings only) that :func:`name_problem` refuses, or two names that
    differ yet look one (:func:`skeleton`: ``Red``/``red``, a full-width ``ｒｅｄ``, a Cyrillic ``асе``
    beside ``ace``). ``known`` are names the list may also use (the built-in colours beside a spec's
    own): compared, not checked."""
    seen: dict[str, str] = {}
    own = [v for v in names if isinstance(v, str)]
    mine = set(own)
    for v in [*own, *(k for k in known if k not in mine)]:
        if v in mine and (why := name_problem(v, concept)) is not None:
            shown = v[:60].encode("ascii", "backslashreplace").decode() + ("..." if len(v) > 60 else "")
            return f"{what} {shown!r} {why}: rename it"
        key = skeleton(v)
        if key in seen and seen[key] != v:
            a, b = (x[:60].encode("ascii", "backslashreplace").decode() for x in (seen[key], v))
            return (f"{what}s {a!r} and {b!r} differ only in case, character form or look-alike letters of another script "
                    "(a reader cannot tell them apart): rename one")
        seen[key] = v
    return None
