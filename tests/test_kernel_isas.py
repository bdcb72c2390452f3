"""The kernels' arithmetic built for the other instruction sets it has code for.

A training run builds lrn_rows.cc and pool_rows.cc with -march=native, so the tests of
the ops (test_kernels.py, test_relu_pool.py) run only this machine's vector code.
Here both files are built for AVX2 (-march=haswell: 8 lanes and AVX2's own
instructions), for AVX without AVX2 (-march=sandybridge: 8 lanes, AVX's rsqrt,
lane moves one by one) and for plain x86-64 (4 lanes, no intrinsics) and called
through ctypes: float32 against TensorFlow's ops, bfloat16 against the same
build's float32.
"""

from __future__ import annotations

import ctypes
import subprocess

import numpy as np
import pytest
import tensorflow as tf

from cifar10.core import cpu
from cifar10.kernels import build

BF16 = tf.bfloat16.as_numpy_dtype
RADIUS, BIAS, ALPHA = 4, 1.0, 0.001 / 9.0
ARCHES = {"haswell": {"avx2", "fma", "bmi2"}, "sandybridge": {"avx"}, "x86-64": set()}


@pytest.fixture(scope="module", params=sorted(ARCHES))
def rows(request, tmp_path_factory):
    """lrn_rows.cc and pool_rows.cc as one library built for ``request.param``."""
    arch = request.param
    cxx = build.compiler()
    if cxx is None:
        pytest.skip("no C++ compiler")
    flags = cpu.features()
    if flags is None or not ARCHES[arch] <= flags:
        pytest.skip(f"this CPU cannot run -march={arch} code")
    library = tmp_path_factory.mktemp(arch) / f"rows-{arch}.so"
    sources = [str(build.SOURCE_DIR / name) for name in ("lrn_rows.cc", "pool_rows.cc")]
    subprocess.run([*cxx, "-shared", "-fPIC", "-O3", "-fno-math-errno", "-std=c++17",
                    f"-march={arch}", "-w", *sources, "-o", str(library)], check=True)
    return ctypes.CDLL(str(library))


def pointer(array: np.ndarray) -> ctypes.c_void_p:
    return ctypes.c_void_p(array.ctypes.data)


def lrn(lib, x: np.ndarray, out_dtype, g: np.ndarray | None = None,
        conv_bias: np.ndarray | None = None, radius: int = RADIUS):
    """The kernel's forward pass (g None: y) or backward pass (dx, and with conv_bias
    the bias gradient) over x's rows of channels; with conv_bias, x is z and LRN's
    input relu(z + conv_bias)."""
    depth = x.shape[-1]
    rows = x.size // depth
    flags = (int(x.dtype == BF16), int(out_dtype == BF16))
    args = (ctypes.c_int64(0), ctypes.c_int64(rows), depth, radius, ctypes.c_float(BIAS),
            ctypes.c_float(ALPHA))
    cb = None if conv_bias is None else pointer(conv_bias)
    if g is None:
        y = np.zeros(x.shape, out_dtype)
        lib.cifar10_lrn_forward(pointer(x), cb, pointer(y), *flags, *args)
        return y
    dx = np.zeros(x.shape, x.dtype)
    dcb = np.zeros([depth], np.float32)
    lib.cifar10_lrn_backward(pointer(x), cb, pointer(g), pointer(dx),
                             None if conv_bias is None else pointer(dcb), *flags, *args)
    return dx if conv_bias is None else (dx, dcb)


def pool(lib, z: np.ndarray, bias: np.ndarray, out_dtype, g: np.ndarray | None = None):
    """(y, arg) of the forward pass, or (dz, dbias) of the backward pass given g."""
    n, h, w, c = z.shape
    args = (ctypes.c_int64(0), ctypes.c_int64(n), h, w, c)
    flags = (int(z.dtype == BF16), int(out_dtype == BF16))
    out_shape = (n, (h + 1) // 2, (w + 1) // 2, c)
    y = np.zeros(out_shape, out_dtype)
    arg = np.zeros(out_shape, np.uint8)
    lib.cifar10_pool_forward(pointer(z), pointer(bias), pointer(y), pointer(arg), *flags, *args)
    if g is None:
        return y, arg
    dz = np.zeros(z.shape, z.dtype)
    dbias = np.zeros((n, c), np.float32)
    lib.cifar10_pool_backward(pointer(g), pointer(arg), pointer(dz), pointer(dbias), *flags,
                              *args)
    return dz, dbias.sum(axis=0)


@pytest.mark.parametrize("depth,radius", [(64, 4), (100, 4), (3, 4), (6, 4), (37, 9),
                                          (20, 32)])
def test_lrn_rows_compute_tensorflows_lrn(rows, depth, radius):
    # Whole vectors of every width, a rest after them (100, 6, 37), fewer channels than
    # a vector, and windows wider than a vector.
    x = 3.0 * np.asarray(tf.random.stateless_normal([2, 3, 5, depth], seed=(1, depth)))
    g = np.sin(x)
    attrs = dict(depth_radius=radius, bias=BIAS, alpha=ALPHA, beta=0.75)
    y_tf = tf.nn.local_response_normalization(x, **attrs)
    dx_tf = tf.raw_ops.LRNGrad(input_grads=g, input_image=x, output_image=y_tf, **attrs)
    np.testing.assert_allclose(lrn(rows, x, np.float32, radius=radius), y_tf, rtol=2e-6,
                               atol=1e-6)
    np.testing.assert_allclose(lrn(rows, x, np.float32, g, radius=radius), dx_tf, rtol=1e-4,
                               atol=2e-6 * np.abs(dx_tf).max())


@pytest.mark.parametrize("depth", [64, 22])
def test_lrn_rows_with_a_convolutions_bias_compute_lrn_of_its_relu(rows, depth):
    # 22: a rest after whole vectors of 8 and of 4 lanes.
    z = np.asarray(tf.random.stateless_normal([2, 3, 5, depth], seed=(9, 9)))
    conv_bias = np.linspace(-1.0, 1.0, depth, dtype=np.float32)
    g = np.cos(z)
    zt, bt = tf.constant(z), tf.constant(conv_bias)
    with tf.GradientTape() as tape:
        tape.watch([zt, bt])
        y_tf = tf.nn.local_response_normalization(tf.nn.relu(zt + bt), depth_radius=RADIUS,
                                                  bias=BIAS, alpha=ALPHA, beta=0.75)
        loss = tf.reduce_sum(y_tf * g)
    dz_tf, dbias_tf = tape.gradient(loss, [zt, bt])
    np.testing.assert_allclose(lrn(rows, z, np.float32, conv_bias=conv_bias), y_tf,
                               rtol=2e-6, atol=1e-6)
    dz, dbias = lrn(rows, z, np.float32, g, conv_bias)
    np.testing.assert_allclose(dz, dz_tf, rtol=1e-4, atol=2e-6)
    np.testing.assert_allclose(dbias, dbias_tf, rtol=1e-5, atol=1e-5)
    assert (dz[z + conv_bias <= 0] == 0).all()  # the ReLU lets no gradient through there


@pytest.mark.parametrize("depth", [64, 21])
def test_lrn_rows_read_and_write_bfloat16_as_float32_rounded_once(rows, depth):
    x = 3.0 * np.asarray(tf.random.stateless_normal([4, 5, depth], seed=(2, 3)))
    x = x.astype(BF16)
    g = np.sin(x.astype(np.float32)).astype(BF16)
    x32 = x.astype(np.float32)
    y32 = lrn(rows, x32, np.float32)
    np.testing.assert_array_equal(lrn(rows, x, BF16), y32.astype(BF16))
    np.testing.assert_array_equal(lrn(rows, x, np.float32), y32)
    dx32 = lrn(rows, x32, np.float32, g.astype(np.float32))
    np.testing.assert_array_equal(lrn(rows, x, BF16, g), dx32.astype(BF16))


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
    y, _ = pool(rows, z, bias, np.float32)
    dz, dbias = pool(rows, z, bias, np.float32, np.asarray(g))
    np.testing.assert_array_equal(y, y_tf)
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


def test_lrn_rows_with_a_bias_read_and_write_bfloat16_as_float32_rounded_once(rows):
    z = np.asarray(tf.random.stateless_normal([3, 4, 22], seed=(4, 4))).astype(BF16)
    conv_bias = np.linspace(-1.0, 1.0, 22, dtype=np.float32)
    g = np.sin(z.astype(np.float32)).astype(BF16)
    z32, g32 = z.astype(np.float32), g.astype(np.float32)
    np.testing.assert_array_equal(lrn(rows, z, BF16, conv_bias=conv_bias),
                                  lrn(rows, z32, np.float32, conv_bias=conv_bias).astype(BF16))
    dz, dbias = lrn(rows, z, BF16, g, conv_bias)
    dz32, dbias32 = lrn(rows, z32, np.float32, g32, conv_bias)
    np.testing.assert_array_equal(dz, dz32.astype(BF16))
    np.testing.assert_array_equal(dbias, dbias32)
