"""Built-in vocabularies: named colours (sRGB), shapes (unit polygons) and named sizes.

Colours follow the MOSAIC paper's ten task colours (red, green, blue, yellow, purple, orange,
cyan, gray, white, black; Jeong et al. 2026, ``constants.py``) plus brown for reference objects
and a few extras from the same file. MOSAIC specified linear RGBA Blender base colours; here they
are sRGB byte triples, chosen so that every pair is far apart in CIELAB (the evaluator's space).

Shapes are polygons with circumradius 1 centred on the origin, in image coordinates (x to the
right, y downwards). An object's ``size`` is the diameter of its circumscribed circle as a
fraction of the image side, so a shape of any kind fits the same disk; the layout search tests
those disks for overlap.
"""

from __future__ import annotations

import difflib
import math

import numpy as np

#: Named colours, sRGB 0-255. The first ten are MOSAIC's task colours in its training order.
COLORS: dict[str, tuple[int, int, int]] = {
    "red": (230, 25, 25),
    "green": (30, 190, 40),
    "blue": (30, 70, 240),
    "yellow": (250, 225, 20),
    "purple": (140, 40, 200),
    "orange": (250, 130, 10),
    "cyan": (20, 220, 230),
    "gray": (140, 140, 140),
    "white": (250, 250, 250),
    "black": (10, 10, 10),
    "brown": (150, 95, 45),
    "pink": (250, 150, 200),
    "maroon": (120, 10, 30),
    "olive": (120, 120, 10),
    "lime": (170, 250, 70),
    "navy": (10, 20, 110),
    "teal": (0, 120, 120),
    "silver": (200, 200, 205),
    "gold": (215, 170, 40),
    "dark_slate": (45, 52, 64),
}

#: MOSAIC's ten task colours in its one-hot (training) order.
MOSAIC_COLORS: tuple[str, ...] = (
    "red", "green", "blue", "yellow", "purple", "orange", "cyan", "gray", "white", "black",
)

#: Named sizes: circumscribed-circle diameter as a fraction of the image side.
SIZES: dict[str, float] = {"tiny": 0.08, "small": 0.12, "medium": 0.16, "large": 0.24, "huge": 0.34}

#: Relation names understood by the grammar (subject relative to object).
RELATIONS: tuple[str, ...] = ("left_of", "right_of", "above", "below")

NUMBER_WORDS = (
    "zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
    "eleven", "twelve",
)


def _regular(n: int, start_deg: float) -> list[tuple[float, float]]:
    return [
        (math.cos(math.radians(start_deg + 360.0 * k / n)), math.sin(math.radians(start_deg + 360.0 * k / n)))
        for k in range(n)
    ]


def _star(points: int = 5, inner: float = 0.45) -> list[tuple[float, float]]:
    out = []
    for k in range(2 * points):
        r = 1.0 if k % 2 == 0 else inner
        a = math.radians(-90.0 + 180.0 * k / points)
        out.append((r * math.cos(a), r * math.sin(a)))
    return out


def _cross(half_width: float = 0.34) -> list[tuple[float, float]]:
    w = half_width
    a = math.sqrt(1.0 - w * w)  # arm tip corners lie on the unit circle
    return [(-w, -a), (w, -a), (w, -w), (a, -w), (a, w), (w, w), (w, a), (-w, a), (-w, w), (-a, w), (-a, -w), (-w, -w)]


#: Unit polygons (circumradius 1, y down). ``circle`` is drawn as a true ellipse, not a polygon.
SHAPES: dict[str, list[tuple[float, float]] | None] = {
    "circle": None,
    "square": _regular(4, 45.0),
    "triangle": _regular(3, -90.0),
    "diamond": [(0.0, -1.0), (0.62, 0.0), (0.0, 1.0), (-0.62, 0.0)],
    "pentagon": _regular(5, -90.0),
    "hexagon": _regular(6, 0.0),
    "star": _star(),
    "cross": _cross(),
}

#: Plural nouns for captions.
PLURALS = {"cross": "crosses"}


def plural(shape: str) -> str:
    """Plural noun of a shape name for captions (``circle`` -> ``circles``)."""
    return PLURALS.get(shape, shape + "s")


def number_word(n: int) -> str:
    """English word for small counts, digits beyond twelve."""
    return NUMBER_WORDS[n] if 0 <= n < len(NUMBER_WORDS) else str(n)


def closest(name: str, options, cutoff: float = 0.5) -> str | None:
    """The closest option to a misspelt ``name`` (difflib ratio >= ``cutoff``), or None."""
    m = difflib.get_close_matches(str(name), [str(o) for o in options], n=1, cutoff=cutoff)
    return m[0] if m else None


def unknown_name_message(kind: str, name, options, hint: str = "") -> str:
    """Error text for an unknown vocabulary name: the name, the closest match and the allowed names."""
    c = closest(name, options)
    guess = f"; did you mean {c!r}?" if c else ""
    return f"unknown {kind} {name!r}{guess} Allowed: {', '.join(sorted(map(str, options)))}.{hint}"


def srgb_to_lab(rgb) -> np.ndarray:
    """CIELAB (D65) of sRGB byte colours.

    Args:
        rgb: array-like ``[..., 3]`` of sRGB values 0-255 (any numeric dtype).
    Returns:
        ``[..., 3]`` float64 array of L* (0-100), a*, b*.
    Source: IEC 61966-2-1 sRGB transfer function; CIE 1976 L*a*b*.
    """
    c = np.asarray(rgb, dtype=np.float64) / 255.0
    lin = np.where(c <= 0.04045, c / 12.92, ((c + 0.055) / 1.055) ** 2.4)
    m = np.array([[0.4124564, 0.3575761, 0.1804375], [0.2126729, 0.7151522, 0.0721750], [0.0193339, 0.1191920, 0.9503041]])
    xyz = lin @ m.T / np.array([0.95047, 1.0, 1.08883])
    f = np.where(xyz > (6 / 29) ** 3, np.cbrt(xyz), xyz / (3 * (6 / 29) ** 2) + 4 / 29)
    return np.stack([116 * f[..., 1] - 16, 500 * (f[..., 0] - f[..., 1]), 200 * (f[..., 1] - f[..., 2])], axis=-1)


def delta_e(rgb1, rgb2) -> float:
    """CIE76 colour difference between two sRGB byte colours (Euclidean distance in CIELAB)."""
    return float(np.linalg.norm(srgb_to_lab(rgb1) - srgb_to_lab(rgb2)))
