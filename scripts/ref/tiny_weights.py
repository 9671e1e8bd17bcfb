# SPDX-License-Identifier: Apache-2.0
"""Deterministic weights for tiny test models, identical in numpy and in tandem's C++ tests.

Every tensor is filled from its own SplitMix64 stream seeded with the FNV-1a 64 hash of its name:
element i takes the (i+1)-th output z, u = (z >> 40) * 2^-24 (exact in float32), and the value is
offset + (2u - 1) * scale computed in float32. tests/llm/tiny_weights.h does the same in C++, so a
test can rebuild the model bit for bit and compare with the logits these scripts write.
"""

import numpy as np

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)


def fnv1a64(name):
    h = 0xCBF29CE484222325
    for b in name.encode():
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def values(name, shape, scale, offset=0.0):
    """float32 array of the given shape (outermost first, row-major)."""
    n = int(np.prod(shape))
    with np.errstate(over="ignore"):
        z = np.uint64(fnv1a64(name)) + np.arange(1, n + 1, dtype=np.uint64) * _GOLDEN
        z = (z ^ (z >> np.uint64(30))) * _M1
        z = (z ^ (z >> np.uint64(27))) * _M2
        z = z ^ (z >> np.uint64(31))
    u = (z >> np.uint64(40)).astype(np.float32) * np.float32(2.0 ** -24)
    v = (np.float32(2.0) * u - np.float32(1.0)) * np.float32(scale)
    if offset != 0.0:
        v = np.float32(offset) + v
    return v.astype(np.float32).reshape(shape)


def tokens(n, vocab):
    """The fixed prompt the tests use: (7 i + 3) mod vocab."""
    return [(7 * i + 3) % vocab for i in range(n)]
