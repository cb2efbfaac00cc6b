import io

import numpy as np
import pytest
from PIL import Image

from mosaic.png import encode_png


@pytest.mark.parametrize("shape", [(64, 64, 3), (32, 48, 3), (17, 5), (1, 1, 3)])
def test_pillow_decodes_the_same_pixels(shape):
    rng = np.random.default_rng(0)
    a = rng.integers(0, 256, shape, dtype=np.uint8)
    a[: shape[0] // 2] = 7  # flat regions as in renders
    data = encode_png(a)
    img = Image.open(io.BytesIO(data))
    img.load()  # verifies CRCs and the zlib stream
    assert img.mode == ("RGB" if len(shape) == 3 else "L") and img.size == (shape[1], shape[0])
    assert np.array_equal(np.asarray(img), a)
    assert encode_png(a) == data


def test_rejects_other_arrays():
    for bad in (np.zeros((4, 4, 4), np.uint8), np.zeros((4, 4), np.float32), np.zeros(4, np.uint8)):
        with pytest.raises(ValueError, match="uint8"):
            encode_png(bad)
