"""The compiled kernels (cifar10.kernels): the same functions as the TensorFlow ops they
replace, also in a model; the build, its cache, and its one-line errors."""

from __future__ import annotations

import os
import shlex

import numpy as np
import pytest
import tensorflow as tf
from cli import call

from cifar10.core import machine
from cifar10.core.errors import Cifar10Error
from cifar10.kernels import build
from cifar10.kernels.layers import (choose, compiled_bias_relu_lrn, compiled_lrn,
                                    compiled_relu_pool)
from cifar10.lrn import fast_lrn, reference_lrn
from cifar10.model import Model
from cifar10.runs import records

GPU = "/job:localhost/replica:0/task:0/device:GPU:0"
CPU = "/job:localhost/replica:0/task:0/device:CPU:0"
F32, BF16, F16 = tf.float32, tf.bfloat16, tf.float16
LRN_ATTRS = dict(depth_radius=4, bias=1.0, alpha=0.001 / 9, beta=0.75)


def as32(t) -> np.ndarray:
    return np.asarray(tf.cast(t, tf.float32))


def tf_bias_relu_lrn(z, bias, dtype=None):
    return fast_lrn(tf.nn.relu(tf.cast(z, tf.float32) + bias), dtype or z.dtype)


def tf_relu_pool(z, bias, dtype=None):
    y = tf.nn.max_pool2d(tf.nn.relu(tf.cast(z, tf.float32) + bias), 3, 2, "SAME")
    return tf.cast(y, dtype or z.dtype)


# kernel: (the compiled function, TensorFlow's ops computing the same, takes a bias)
KERNELS = {"lrn": (compiled_lrn, reference_lrn, False),
           "bias_relu_lrn": (compiled_bias_relu_lrn, tf_bias_relu_lrn, True),
           "relu_pool": (compiled_relu_pool, tf_relu_pool, True)}


def values_and_gradients(function, inputs, dtype=None):
    """(y, dy/d each input) of a weighted sum of y (every output's gradient differs)."""
    with tf.GradientTape() as tape:
        tape.watch(inputs)
        y = function(*inputs, dtype)
        weights = tf.cos(tf.reshape(tf.range(tf.size(y), dtype=tf.float32), y.shape))
        loss = tf.reduce_sum(tf.cast(y, tf.float32) * weights)
    return y, *tape.gradient(loss, inputs)


def inputs(kernel, shape, dtype=F32, seed=1):
    z = tf.cast(3.0 * tf.random.stateless_normal(shape, seed=(seed, len(shape))), dtype)
    bias = 0.3 * tf.random.stateless_normal(shape[-1:], seed=(seed, 2))
    return [z, bias] if KERNELS[kernel][2] else [z]


@pytest.mark.parametrize("kernel, shape", [
    # The model's depth, fewer channels than LRN's window, a depth of its own, one.
    *(("lrn", s) for s in ([2, 5, 5, 64], [3, 2, 2, 3], [2, 1, 3, 100], [7, 1, 1, 1])),
    # conv2's depth, whole vectors and a rest, fewer channels than a vector.
    *(("bias_relu_lrn", s) for s in ([4, 6, 6, 64], [3, 2, 5, 100], [2, 1, 1, 3])),
    # conv1's shape, odd sizes (SAME pads a row and a column), a rest, a single value.
    *(("relu_pool", s) for s in ([4, 24, 24, 64], [3, 7, 5, 3], [2, 6, 6, 100],
                                 [2, 1, 1, 1]))])
def test_the_kernel_computes_tensorflows_ops_and_their_gradients(kernel, shape):
    compiled, ops, _ = KERNELS[kernel]
    x = inputs(kernel, shape)
    got, want = values_and_gradients(compiled, x), values_and_gradients(ops, x)
    assert [t.dtype for t in got] == [F32] * len(got)
    if kernel == "relu_pool":
        assert got[0].shape == [shape[0], (shape[1] + 1) // 2, (shape[2] + 1) // 2, shape[3]]
        # The same bits but the bias's gradient, summed in another order.
        np.testing.assert_array_equal(got[0], want[0])
        np.testing.assert_array_equal(got[1], want[1])
        np.testing.assert_allclose(got[2], want[2], rtol=1e-5, atol=5e-5)
        return
    assert got[0].shape == shape
    np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=1e-6)
    for g, g_ref in zip(got[1:], want[1:]):
        np.testing.assert_allclose(g, g_ref, rtol=1e-4, atol=1e-4)
    if kernel == "lrn":  # not the identity: the window does normalise
        assert np.abs(got[0] - x[0]).max() > 1e-3
    else:  # no gradient through the ReLU where z + bias <= 0, some elsewhere
        below = (x[0] + x[1] <= 0).numpy()
        assert below.any() and not below.all()
        assert (got[1].numpy()[below] == 0).all() and (got[1].numpy()[~below] != 0).any()


@pytest.mark.parametrize("kernel", list(KERNELS))
@pytest.mark.parametrize("in_dtype, out_dtype", [(BF16, F32), (BF16, BF16), (F32, BF16),
                                                 (F16, F16), (F16, BF16)])
def test_the_kernel_reads_and_writes_the_types_it_is_given(kernel, in_dtype, out_dtype):
    # As under --use_bf16: computed in float32 and rounded once, as tf.cast around the ops.
    compiled, ops, _ = KERNELS[kernel]
    x = inputs(kernel, [2, 6, 6, 64], in_dtype, seed=5)
    got, want = (values_and_gradients(f, x, out_dtype) for f in (compiled, ops))
    assert [t.dtype for t in got] == [out_dtype, in_dtype, F32][:len(got)]
    if out_dtype == BF16:  # equal but where two float32 roundings straddle a bfloat16 one
        assert np.mean(as32(got[0]) == as32(want[0])) > 0.99
    np.testing.assert_allclose(as32(got[0]), as32(want[0]),
                               rtol=1e-5 if out_dtype == F32 else 1e-2, atol=1e-6)
    np.testing.assert_allclose(as32(got[1]), as32(want[1]), rtol=2e-2, atol=1e-3)
    if len(got) > 2:
        np.testing.assert_allclose(got[2], want[2], rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("radius, depth, scale, bias", [
    # Windows across the kernel's vectors, wider than one, past a depth not a multiple.
    (0, 64, 3.0, 2.0), (1, 64, 3.0, 2.0), (7, 40, 3.0, 2.0), (20, 64, 3.0, 2.0),
    (32, 33, 3.0, 2.0), (3, 1024, 3.0, 2.0),
    # d from about 1e-21 to 1e26, where d^-7/4 alone would under- or overflow float32.
    (4, 64, 1e12, 1.0), (4, 64, 1e14, 1.0), (4, 64, 1e-12, 1e-20)])
def test_the_lrn_op_computes_tensorflows_lrn_for_any_window_depth_and_scale(
        radius, depth, scale, bias):
    x = scale * tf.random.stateless_normal([3, 5, depth], seed=(radius, depth))
    upstream = tf.sin(x / scale)
    attrs = dict(depth_radius=radius, bias=bias, alpha=0.01)
    ops = build.load()
    y = ops.cifar10_lrn(x, Tout=tf.float32, **attrs)
    dx = ops.cifar10_lrn_grad(x, upstream, **attrs)
    y_tf = tf.nn.local_response_normalization(x[None], beta=0.75, **attrs)[0]
    dx_tf = tf.raw_ops.LRNGrad(input_grads=upstream[None], input_image=x[None],
                               output_image=y_tf[None], beta=0.75, **attrs)[0]
    extreme = scale != 3.0
    assert np.isfinite(dx).all() and np.isfinite(y).all()
    np.testing.assert_allclose(y, y_tf, rtol=1e-5 if extreme else 2e-6,
                               atol=1e-6 * np.abs(y_tf).max())
    np.testing.assert_allclose(dx, dx_tf, rtol=1e-3 if extreme else 1e-4,
                               atol=(1e-5 if extreme else 2e-6) * np.abs(dx_tf).max())


def test_the_bias_gradient_is_the_same_however_the_batch_is_shared_out():
    # Summed image by image in a fixed order: the same bits each run.
    z = tf.random.stateless_normal([128, 12, 12, 64], seed=(2, 5))
    bias = tf.random.stateless_normal([64], seed=(2, 6))
    upstream = tf.random.stateless_normal([128, 12, 12, 64], seed=(2, 7))

    def bias_gradient(images):
        with tf.GradientTape() as tape:
            tape.watch(bias)
            y = compiled_bias_relu_lrn(z[images], bias)
        return tape.gradient(y, bias, output_gradients=upstream[images])

    first = bias_gradient(slice(None))
    for _ in range(3):
        np.testing.assert_array_equal(bias_gradient(slice(None)), first)
    each = sum(bias_gradient(slice(i, i + 1)) for i in range(0, 128))
    np.testing.assert_allclose(first, each, rtol=1e-4, atol=1e-3)


def test_pooling_ties_zeros_and_nans_as_tensorflow():
    # Ties send the gradient to the first maximum, as TensorFlow's.
    z = np.zeros([1, 6, 6, 16], np.float32)
    z[0, :3, :3] = 2.0  # nine equal maxima in the first window
    z[0, 4, 4] = z[0, 4, 5] = 5.0  # two in the next row's
    _, dz, _ = values_and_gradients(compiled_relu_pool, [tf.constant(z), tf.zeros([16])])
    _, dz_ref, _ = values_and_gradients(tf_relu_pool, [tf.constant(z), tf.zeros([16])])
    np.testing.assert_array_equal(dz, dz_ref)
    assert np.argwhere(dz.numpy()[0, :, :, 0]).tolist() == [[0, 0], [0, 2], [2, 0], [4, 4]]
    # Where the ReLU gives exactly 0 (-1 + 1), no gradient to z or the bias.
    bias = tf.concat([tf.fill([8], 1.0), tf.fill([8], 2.0)], 0)
    y, dz, dbias = values_and_gradients(compiled_relu_pool, [tf.fill([1, 4, 4, 16], -1.0), bias])
    assert np.all(y[..., :8] == 0) and np.all(y[..., 8:] == 1)
    assert np.all(dz[..., :8] == 0) and np.all(dbias[:8] == 0)
    assert np.count_nonzero(dz[..., 8:]) == 4 * 8 and np.all(dbias[8:] != 0)
    # A NaN is passed over, first or last in its window.
    for place in ((0, 0), (1, 1)):
        z = np.ones([1, 2, 2, 1], np.float32)
        z[0, place[0], place[1], 0] = np.nan
        y, dz, _ = values_and_gradients(compiled_relu_pool, [tf.constant(z), tf.zeros([1])])
        assert float(y[0, 0, 0, 0]) == 1.0 and float(tf.reduce_sum(dz)) != 0.0


def test_a_nan_gradient_stays_nan_where_the_relu_is_off():
    # As TensorFlow's ReLU gradient, which multiplies by its mask.
    z = tf.constant([[[-1.0, 2.0, -3.0]]])
    with tf.GradientTape() as tape:
        tape.watch(z)
        y = compiled_bias_relu_lrn(z, tf.zeros([3]))
    dz = tape.gradient(y, z, output_gradients=tf.constant([[[np.nan, 1.0, 1.0]]]))
    assert np.isnan(dz.numpy()[0, 0, 0])


@pytest.mark.parametrize("call_op, message", [
    (lambda: compiled_lrn(tf.ones([2, 1025])), "the last axis may hold 1 to 1024 channels"),
    (lambda: compiled_bias_relu_lrn(tf.ones([2, 3, 3, 8]), tf.ones([7])),
     "Cifar10BiasReluLrn: z must have a batch axis and conv_bias one value per channel"),
    (lambda: compiled_relu_pool(tf.ones([1, 4, 4, 8]), tf.ones([7])), "one bias per channel"),
    (lambda: compiled_relu_pool(tf.ones([1, 2, 2, 0]), tf.ones([0])),
     r"z must be \[batch, rows, columns, channels\], at least one channel and under "
     r"2\^31 values an image")])
def test_the_ops_say_what_they_take(call_op, message):
    with pytest.raises(tf.errors.InvalidArgumentError, match=message):
        call_op()


def model_pass(**model_args):
    """(activations, loss, gradients, each stage's output type) of a model's pass."""
    images = tf.random.stateless_normal([8, 24, 24, 3], seed=(1, 1))
    model = Model(seed=3, **model_args)
    with tf.GradientTape() as tape:
        acts = model.activations(images)
        loss = model.loss(acts["softmax_linear"], tf.range(8)).total
    types = {name: out.dtype for name, out in model.stage_outputs(images).items()}
    return acts, loss, tape.gradient(loss, model.parameters()), types


@pytest.mark.parametrize("dtype", [F32, BF16])
@pytest.mark.parametrize("kernel, layer, atol", [
    ("lrn", "conv2", 1e-5),  # conv2 comes after norm1
    ("relu_pool", "conv1", 0.0),  # the summaries' activation to the bit
    ("relu_lrn", "conv2", 1e-6)])
def test_a_model_with_the_kernel_computes_the_model_without_it(kernel, layer, atol, dtype,
                                                               monkeypatch):
    monkeypatch.setattr(machine, "has_amx", lambda: True)  # conv1 in bfloat16 before pool1
    before = {"lrn": {}, "relu_pool": dict(lrn=compiled_lrn),
              "relu_lrn": dict(lrn=compiled_lrn, relu_pool=compiled_relu_pool)}[kernel]
    with_it = {"lrn": dict(lrn=compiled_lrn), "relu_pool": dict(relu_pool=compiled_relu_pool),
               "relu_lrn": dict(relu_lrn=compiled_bias_relu_lrn)}[kernel]
    acts, loss, grads, types = model_pass(compute_dtype=dtype, **before)
    k_acts, k_loss, k_grads, k_types = model_pass(compute_dtype=dtype, **before, **with_it)
    if kernel == "relu_lrn":
        assert k_types == types  # each stage's output in the same precision
    if dtype == F32:  # the same function, to float32's rounding
        np.testing.assert_allclose(k_acts[layer], acts[layer], rtol=1e-6 if atol else 0,
                                   atol=atol)
        np.testing.assert_allclose(k_loss, loss, rtol=1e-6)
        for g_k, g in zip(k_grads, grads):
            np.testing.assert_allclose(g_k, g, rtol=1e-4, atol=1e-6)
    else:  # as two bfloat16 passes agree: the loss within 1%, the gradients' directions
        if kernel != "lrn":  # the bias and ReLU in float32 with the kernel
            assert k_acts[layer].dtype == F32
        np.testing.assert_allclose(k_loss, loss, rtol=1e-2)
        for g_k, g in zip(k_grads, grads):
            a, b = g_k.numpy().ravel(), g.numpy().ravel()
            assert a @ b > 0.97 * np.linalg.norm(a) * np.linalg.norm(b)


def test_choose_takes_the_kernels_on_cpus_and_tensorflows_ops_on_gpus_or_under_xla():
    assert choose("auto", [CPU, CPU], xla=False) == (
        compiled_lrn, compiled_relu_pool, compiled_bias_relu_lrn, "compiled", "CPU replicas")
    assert choose("compiled", [CPU], xla=False).kernel == "compiled"
    assert choose("tensorflow", [CPU], xla=False)[:4] == (fast_lrn, None, None, "tensorflow")
    on_gpu = choose("auto", [GPU], xla=False)
    assert on_gpu[:4] == (fast_lrn, None, None, "tensorflow") and "GPUs" in on_gpu.reason
    assert choose("auto", [CPU], xla=True).reason == "XLA cannot compile the kernels (--xla)"
    with pytest.raises(Cifar10Error, match=r"^--kernels=compiled: cannot run here: the "
                                           r"replicas are GPUs .*; or use --kernels=auto"):
        choose("compiled", [GPU], xla=False)
    with pytest.raises(Cifar10Error, match="^--kernels must be one of auto, compiled, "
                                           "tensorflow, got 'fast'$"):
        choose("fast", [CPU], xla=False)


# The tests' own kernel cache (conftest.py), before ``fresh`` empties it for a test.
SHARED_CACHE = os.environ[build.CACHE_ENV]


@pytest.fixture
def fresh(monkeypatch, tmp_path):
    """An empty kernel cache, and a process that has not loaded the kernels yet."""
    monkeypatch.setenv(build.CACHE_ENV, str(tmp_path / "cache"))
    monkeypatch.setattr(build, "_loaded", {})
    return tmp_path / "cache"


@pytest.fixture
def sources(monkeypatch, tmp_path):
    """A small library's sources in place of the kernels' (fast to build)."""
    folder = tmp_path / "src"
    folder.mkdir()
    monkeypatch.setattr(build, "SOURCE_DIR", folder)
    return folder


def test_cifar10_train_without_a_compiler(fresh, monkeypatch, tmp_path, learnable_files):
    monkeypatch.setenv("CXX", "/nonexistent/c++")
    files, _ = learnable_files
    data_dir = os.path.dirname(os.path.dirname(files[0]))
    common = [f"--data_dir={data_dir}", "--max_steps=2", "--batch_size=8", "--log_frequency=1"]
    forced = call("cifar10-train", f"--train_dir={tmp_path / 'forced'}",
                  "--kernels=compiled", *common)
    assert forced.returncode == 1
    assert forced.stderr.strip().splitlines()[-1].startswith(
        "cifar10-train: error: --kernels=compiled: cannot run the C++ compiler "
        "/nonexistent/c++: ")
    assert forced.stderr.strip().endswith("; or use --kernels=auto, which falls back to "
                                          "TensorFlow's ops")
    assert not os.path.exists(tmp_path / "forced" / "checkpoint")
    # auto trains with TensorFlow's ops, without a word, and says why in the record.
    auto = call("cifar10-train", f"--train_dir={tmp_path / 'auto'}", *common)
    assert auto.returncode == 0, auto.stderr
    assert "warning" not in auto.stderr + auto.stdout
    record = records.last_record(str(tmp_path / "auto"))
    assert record["kernels"]["kernel"] == "tensorflow"
    assert record["kernels"]["reason"].startswith("cannot run the C++ compiler /nonexistent/c++")
    monkeypatch.delenv("CXX")
    monkeypatch.setenv("PATH", str(fresh))  # no compiler on it
    with pytest.raises(build.KernelBuildError,
                       match=r"^no C\+\+ compiler found \(install g\+\+, or set CXX\)$"):
        build.library("cifar10_lrn", ["lrn_rows.cc"], ["lrn_op.cc"])
    assert not fresh.exists() or not os.listdir(fresh)


def test_the_trainer_records_which_kernels_it_ran(trained_run):
    train_dir, _ = trained_run
    assert records.last_record(str(train_dir))["kernels"] == {"kernel": "compiled",
                                                              "reason": "CPU replicas"}


def test_a_build_is_kept_and_reused_and_a_changed_source_builds_anew(fresh, sources,
                                                                       monkeypatch, caplog):
    # Both kinds of source, and a CXX with arguments as a compiler launcher's.
    monkeypatch.setenv("CXX", f"env CIFAR10_TEST=1 {shlex.join(build.compiler())}")
    assert build.compiler()[:2] == ["env", "CIFAR10_TEST=1"]
    (sources / "rows.h").write_text("int rows();\n")
    (sources / "rows.cc").write_text('#include "rows.h"\nint rows() { return 24; }\n')
    (sources / "op.cc").write_text("int rows();\nint op() { return rows(); }\n")
    first = build.library("cifar10_rows", ["rows.cc"], ["op.cc"])
    assert first.parent == fresh and first.name.startswith("cifar10_rows-")
    said = [r.getMessage() for r in caplog.records if getattr(r, "notice", False)]
    assert said == [f"compiling the CPU kernels for this machine (once, about 15 s; cached "
                    f"in {fresh})"]
    assert os.listdir(fresh) == [first.name]  # no temporary folder left
    built_at = first.stat().st_mtime_ns

    real_run = build._run

    def no_compiling(command, what):  # but asking the compiler's version (the key's)
        assert what.startswith("run the C++ compiler"), f"compiled again: {what}"
        return real_run(command, what)

    with monkeypatch.context() as no_build:
        no_build.setattr(build, "_run", no_compiling)
        assert build.library("cifar10_rows", ["rows.cc"], ["op.cc"]) == first
    assert first.stat().st_mtime_ns == built_at
    assert len(caplog.records) == 1  # no second notice
    # Another source is another library, beside the first; so is a changed header.
    (sources / "rows.cc").write_text((sources / "rows.cc").read_text() + "\n// edit\n")
    second = build.library("cifar10_rows", ["rows.cc"], ["op.cc"])
    assert second != first and sorted(os.listdir(fresh)) == sorted([first.name, second.name])
    (sources / "rows.h").write_text((sources / "rows.h").read_text() + "\n// edit\n")
    third = build.library("cifar10_rows", ["rows.cc"], ["op.cc"])
    assert third not in (first, second) and len(os.listdir(fresh)) == 3


def test_a_source_that_does_not_compile_is_one_line_and_leaves_nothing(fresh, sources):
    (sources / "broken.cc").write_text("int f() { return undeclared_name; }\n")
    with pytest.raises(build.KernelBuildError) as raised:
        build.library("broken", ["broken.cc"], [])
    message = str(raised.value)
    assert message.startswith("cannot compile broken.cc: ") and "undeclared_name" in message
    assert "\n" not in message
    assert os.listdir(fresh) == []  # the temporary build folder is gone


def test_an_unwritable_cache_is_one_line_naming_it_and_the_variable(fresh, monkeypatch,
                                                                    tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a folder")
    monkeypatch.setenv(build.CACHE_ENV, str(blocker / "cache"))
    with pytest.raises(build.KernelBuildError,
                       match=rf"^cannot write the kernel cache {blocker / 'cache'} \(.+\); "
                             rf"set CIFAR10_KERNEL_CACHE to a writable directory$"):
        build.library("cifar10_lrn", ["lrn_rows.cc"], ["lrn_op.cc"])


def test_the_cache_defaults_to_the_users_cache_folder(monkeypatch, tmp_path):
    monkeypatch.delenv(build.CACHE_ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert build.cache_dir() == tmp_path / "xdg" / "cifar10" / "kernels"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert build.cache_dir() == tmp_path / "home" / ".cache" / "cifar10" / "kernels"


def test_a_library_that_does_not_load_is_one_line_saying_to_delete_it(fresh, monkeypatch):
    # The library's name from the tests' own cache (built once for all of them).
    with monkeypatch.context() as shared:
        shared.setenv(build.CACHE_ENV, SHARED_CACHE)
        built = build.library(build.NAME, build.NATIVE_SOURCES, build.TF_SOURCES)
    fresh.mkdir(parents=True)
    path = fresh / built.name
    path.write_bytes(b"not a shared library")
    chosen = choose("auto", [CPU], xla=False)
    assert chosen.kernel == "tensorflow"
    assert chosen.reason.startswith(f"cannot load the compiled kernels {path} (")
    assert chosen.reason.endswith("); delete the file to have it built again")
