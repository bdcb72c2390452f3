"""The kernels' arithmetic built for the other instruction sets it has code for.

A run builds lrn_rows.cc and pool_rows.cc with -march=native, so test_kernels.py runs
only this machine's vector code.  Here they are built for AVX2 (-march=haswell), AVX
without AVX2 (-march=sandybridge: AVX's rsqrt, lane moves one by one) and plain x86-64
(4 lanes, no intrinsics) and called through ctypes: float32 against TensorFlow's ops,
bfloat16 against the same build's float32.
"""

from __future__ import annotations

import ctypes
import subprocess

import numpy as np
import pytest
import tensorflow as tf

from cifar10.core import machine
from cifar10.kernels import build

BF16 = tf.bfloat16.as_numpy_dtype
RADIUS, BIAS, ALPHA = 4, 1.0, 0.001 / 9.0
ARCHES = {"haswell": {"avx2", "fma", "bmi2"}, "sandybridge": {"avx"}, "x86-64": set()}


@pytest.fixture(scope="module", params=sorted(ARCHES))
def rows(request, tmp_path_factory):
    """lrn_rows.cc and pool_rows.cc as one library built for ``request.param``."""
    arch, cxx, flags = request.param, build.compiler(), machine.features()
    if cxx is None:
        pytest.skip("no C++ compiler")
    if flags is None or not ARCHES[arch] <= flags:
        pytest.skip(f"this CPU cannot run -march={arch} code")
    library = tmp_path_factory.mktemp(arch) / f"rows-{arch}.so"
    sources = [str(build.SOURCE_DIR / name) for name in build.NATIVE_SOURCES]
    subprocess.run([*cxx, "-shared", "-fPIC", "-O3", "-fno-math-errno", "-std=c++17",
                    f"-march={arch}", "-w", *sources, "-o", str(library)], check=True)
    return ctypes.CDLL(str(library))


def pointer(array: np.ndarray | None) -> ctypes.c_void_p | None:
    return None if array is None else ctypes.c_void_p(array.ctypes.data)


def lrn(lib, x, out_dtype, g=None, conv_bias=None, radius=RADIUS):
    """The forward pass (g None: y) or the backward pass (dx, and with conv_bias the
    bias gradient) over x's rows of channels; with conv_bias, LRN of relu(x + conv_bias)."""
    depth = x.shape[-1]
    flags = (int(x.dtype == BF16), int(out_dtype == BF16))
    args = (ctypes.c_int64(0), ctypes.c_int64(x.size // depth), depth, radius,
            ctypes.c_float(BIAS), ctypes.c_float(ALPHA))
    if g is None:
        y = np.zeros(x.shape, out_dtype)
        lib.cifar10_lrn_forward(pointer(x), pointer(conv_bias), pointer(y), *flags, *args)
        return y
    dx, dcb = np.zeros(x.shape, x.dtype), np.zeros([depth], np.float32)
    lib.cifar10_lrn_backward(pointer(x), pointer(conv_bias), pointer(g), pointer(dx),
                             None if conv_bias is None else pointer(dcb), *flags, *args)
    return dx if conv_bias is None else (dx, dcb)


def pool(lib, z, bias, out_dtype, g=None):
    """(y, arg) of the forward pass, or (dz, dbias) of the backward pass given g."""
    n, h, w, c = z.shape
    args = (ctypes.c_int64(0), ctypes.c_int64(n), h, w, c)
    flags = (int(z.dtype == BF16), int(out_dtype == BF16))
    y = np.zeros((n, (h + 1) // 2, (w + 1) // 2, c), out_dtype)
    arg = np.zeros(y.shape, np.uint8)
    lib.cifar10_pool_forward(pointer(z), pointer(bias), pointer(y), pointer(arg), *flags, *args)
    if g is None:
        return y, arg
    dz, dbias = np.zeros(z.shape, z.dtype), np.zeros((n, c), np.float32)
    lib.cifar10_pool_backward(pointer(g), pointer(arg), pointer(dz), pointer(dbias), *flags,
                              *args)
    return dz, dbias.sum(axis=0)


@pytest.mark.parametrize("depth, radius, with_bias", [
    # Whole vectors of every width, a rest after them (100, 6, 37, 22), fewer channels
    # than a vector, windows wider than a vector; after a convolution's bias and ReLU.
    (64, 4, False), (100, 4, False), (3, 4, False), (6, 4, False), (37, 9, False),
    (20, 32, False), (64, 4, True), (22, 4, True)])
def test_lrn_rows_compute_tensorflows_lrn(rows, depth, radius, with_bias):
    x = 3.0 * np.asarray(tf.random.stateless_normal([2, 3, 5, depth], seed=(1, depth)))
    conv_bias = np.linspace(-1.0, 1.0, depth, dtype=np.float32) if with_bias else None
    g = np.sin(x)
    xt, bt = tf.constant(x), tf.constant(conv_bias if with_bias else np.zeros(depth, np.float32))
    with tf.GradientTape() as tape:
        tape.watch([xt, bt])
        y_tf = tf.nn.local_response_normalization(tf.nn.relu(xt + bt) if with_bias else xt,
                                                  depth_radius=radius, bias=BIAS,
                                                  alpha=ALPHA, beta=0.75)
        loss = tf.reduce_sum(y_tf * g)
    dx_tf, dbias_tf = tape.gradient(loss, [xt, bt])
    np.testing.assert_allclose(lrn(rows, x, np.float32, conv_bias=conv_bias, radius=radius),
                               y_tf, rtol=2e-6, atol=1e-6)
    got = lrn(rows, x, np.float32, g, conv_bias, radius)
    dx = got[0] if with_bias else got
    np.testing.assert_allclose(dx, dx_tf, rtol=1e-4, atol=2e-6 * np.abs(dx_tf).max())
    if with_bias:
        np.testing.assert_allclose(got[1], dbias_tf, rtol=1e-5, atol=1e-5)
        assert (dx[x + conv_bias <= 0] == 0).all()  # no gradient through the ReLU there


@pytest.mark.parametrize("depth, with_bias", [(64, False), (21, False), (22, True)])
def test_lrn_rows_read_and_write_bfloat16_as_float32_rounded_once(rows, depth, with_bias):
    x = (3.0 * np.asarray(tf.random.stateless_normal([4, 5, depth], seed=(2, 3)))).astype(BF16)
    conv_bias = np.linspace(-1.0, 1.0, depth, dtype=np.float32) if with_bias else None
    g = np.sin(x.astype(np.float32)).astype(BF16)
    x32, g32 = x.astype(np.float32), g.astype(np.float32)
    y32 = lrn(rows, x32, np.float32, conv_bias=conv_bias)
    np.testing.assert_array_equal(lrn(rows, x, BF16, conv_bias=conv_bias), y32.astype(BF16))
    np.testing.assert_array_equal(lrn(rows, x, np.float32, conv_bias=conv_bias), y32)
    got, want = lrn(rows, x, BF16, g, conv_bias), lrn(rows, x32, np.float32, g32, conv_bias)
    if with_bias:
        np.testing.assert_array_equal(got[1], want[1])
        got, want = got[0], want[0]
    np.testing.assert_array_equal(got, want.astype(BF16))


@pytest.mark.parametrize("shape", [[2, 24, 24, 64], [3, 7, 5, 20], [2, 3, 3, 3]])
def test_pool_rows_compute_tensorflows_bias_relu_and_max_pool(rows, shape):
    z = np.asarray(tf.random.stateless_normal(shape, seed=(4, shape[-1])))
    bias = 0.3 * np.asarray(tf.random.stateless_normal(shape[-1:], seed=(5, 6)))
    zt, bt = tf.constant(z), tf.constant(bias)
    with tf.GradientTape() as tape:
        tape.watch([zt, bt])
        y_tf = tf.nn.max_pool2d(tf.nn.relu(zt + bt), 3, 2, "SAME")
        g = tf.cos(tf.reshape(tf.range(tf.size(y_tf), dtype=tf.float32), y_tf.shape))
        loss = tf.reduce_sum(y_tf * g)
    dz_tf, dbias_tf = tape.gradient(loss, [zt, bt])
    np.testing.assert_array_equal(pool(rows, z, bias, np.float32)[0], y_tf)
    dz, dbias = pool(rows, z, bias, np.float32, np.asarray(g))
    np.testing.assert_allclose(dz, dz_tf, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(dbias, dbias_tf, rtol=1e-5, atol=1e-5)


def test_pool_rows_read_and_write_bfloat16_as_float32_rounded_once(rows):
    z = np.asarray(tf.random.stateless_normal([2, 9, 9, 20], seed=(7, 8))).astype(BF16)
    bias = np.linspace(-0.5, 0.5, 20, dtype=np.float32)
    y32, _ = pool(rows, z.astype(np.float32), bias, np.float32)
    np.testing.assert_array_equal(pool(rows, z, bias, BF16)[0], y32.astype(BF16))
    g = np.cos(np.arange(y32.size, dtype=np.float32)).reshape(y32.shape).astype(BF16)
    dz32, dbias32 = pool(rows, z.astype(np.float32), bias, np.float32, g.astype(np.float32))
    dz, dbias = pool(rows, z, bias, BF16, g)
    np.testing.assert_array_equal(dz, dz32.astype(BF16))
    np.testing.assert_allclose(dbias, dbias32, rtol=1e-6, atol=1e-6)
