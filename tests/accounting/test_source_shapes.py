"""RandomSource samplers take numpy-style sizes (issue 25, item 5): an int n (shape (n,)), a shape tuple, ``()``
(a 0-d array). An int size draws exactly what the low-level sampler of ``accounting.noise`` draws from the same
stream (the byte stream did not change); a shaped draw is the flat draw of prod(shape) values reshaped in C order
and leaves the stream where the flat draw does; a bad size raises ``InvalidParameterError`` naming ``size``."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dprag.accounting.noise import discrete, secure
from dprag.accounting.noise.source import RandomSource
from dprag.errors import InvalidParameterError

SEED = b"shapes"


def _src(label: str) -> RandomSource:
    return RandomSource.from_seed(SEED, label.encode())


# (method name, argument, the low-level draw of n values from a source, dtype)
SAMPLERS = [
    ("laplace", 1.5, lambda n, s: secure.laplace(1.5, n, s), np.float64),
    ("gaussian", 2.0, lambda n, s: secure.gaussian(2.0, n, s), np.float64),
    ("discrete_laplace", 3.0, lambda n, s: discrete.discrete_laplace(3.0, n, s), np.int64),
    ("discrete_gaussian", 2.5, lambda n, s: discrete.discrete_gaussian(2.5, n, s), np.int64),
    ("integers", 7, lambda n, s: s.uniform_below(7, n), np.int64),
    ("uniform01", None, lambda n, s: (s.uint64(n) >> np.uint64(11)).astype(np.float64) * 2.0**-53, np.float64),
]
IDS = [s[0] for s in SAMPLERS]


def _draw(src: RandomSource, name: str, arg: object, size: object) -> object:
    method = getattr(src, name)
    return method(size) if arg is None else method(arg, size)


@pytest.mark.parametrize(("name", "arg", "low", "dtype"), SAMPLERS, ids=IDS)
def test_int_size_draws_what_the_low_level_sampler_draws(name, arg, low, dtype):
    for n in (0, 1, 17, 1000):
        got = _draw(_src(f"{name}/{n}"), name, arg, n)
        ref = low(n, _src(f"{name}/{n}"))  # same seed and label: the unchanged low-level sampler
        assert isinstance(got, np.ndarray) and got.shape == (n,) and got.dtype == dtype
        np.testing.assert_array_equal(got, ref)
        # numpy integer sizes are ints too
        np.testing.assert_array_equal(_draw(_src(f"{name}/{n}"), name, arg, np.int64(n)), ref)


@pytest.mark.parametrize(("name", "arg", "low", "dtype"), SAMPLERS, ids=IDS)
@pytest.mark.parametrize("shape", [(2, 3), (4, 1, 5), (0,), (3, 0), (1,), (6,)])
def test_shaped_draw_is_the_flat_draw_reshaped_and_leaves_the_stream_in_step(name, arg, low, dtype, shape):
    a, b = _src(f"{name}/{shape}"), _src(f"{name}/{shape}")
    got = _draw(a, name, arg, shape)
    flat = _draw(b, name, arg, math.prod(shape))
    assert isinstance(got, np.ndarray) and got.shape == shape and got.dtype == dtype
    np.testing.assert_array_equal(got, flat.reshape(shape))
    assert a.uint64(4).tolist() == b.uint64(4).tolist()  # the same words were consumed


@pytest.mark.parametrize(("name", "arg", "low", "dtype"), SAMPLERS, ids=IDS)
def test_empty_tuple_gives_a_0d_array_and_none_a_python_scalar(name, arg, low, dtype):
    zero_d = _draw(_src(name), name, arg, ())
    assert isinstance(zero_d, np.ndarray) and zero_d.shape == () and zero_d.dtype == dtype
    one = low(1, _src(name))
    assert zero_d.item() == one[0]
    scalar = _draw(_src(name), name, arg, None)
    assert type(scalar) is (int if dtype == np.int64 else float)
    assert scalar == one[0]


@pytest.mark.parametrize(("name", "arg", "low", "dtype"), SAMPLERS, ids=IDS)
@pytest.mark.parametrize("bad", [-1, True, False, 2.0, 1.5, "3", [2, 3], (2, -1), (2, 3.0), (np.True_,), (None,)])
def test_bad_size_raises_naming_size_and_the_rule(name, arg, low, dtype, bad):
    src = _src("bad")
    with pytest.raises(InvalidParameterError) as e:
        _draw(src, name, arg, bad)
    assert e.value.field == "size"
    assert "integer >= 0" in e.value.rule
    assert src.uint64(1).tolist() == _src("bad").uint64(1).tolist()  # refused before reading the stream
