"""The compiled kernels: LRN, the same function as tf.nn.lrn, also after a
convolution's bias and ReLU (conv1's bias, ReLU and pool1 are tests/test_relu_pool.py's);
the library built once per machine and TensorFlow, and a one-line error or
TensorFlow's ops where it cannot be built or run."""

from __future__ import annotations

import os
import shlex

import numpy as np
import pytest
import tensorflow as tf
import model_pairs
from cli import run

from cifar10.core.errors import Cifar10Error
from cifar10.kernels import build
from cifar10.kernels import choice, lrn, ops
from cifar10.kernels.pool import compiled_relu_pool
from cifar10.lrn import fast_lrn, reference_lrn
from cifar10.runs import records

GPU = "/job:localhost/replica:0/task:0/device:GPU:0"
CPU = "/job:localhost/replica:0/task:0/device:CPU:0"


def values_and_gradients(function, x):
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = function(x)
        # A weighted sum, so that every output's gradient differs.
        loss = tf.reduce_sum(tf.cast(y, tf.float32) * tf.sin(tf.cast(x, tf.float32)))
    return y, tape.gradient(loss, x)


@pytest.mark.parametrize("shape", [[2, 5, 5, 64], [3, 2, 2, 3], [2, 1, 3, 100], [7, 1, 1, 1]])
def test_the_kernel_computes_tf_nn_lrn_and_its_gradient(shape):
    # Depth 64 (the model's), fewer channels than the window, a depth of its own, one.
    x = 3.0 * tf.random.stateless_normal(shape, seed=(4, len(shape)))
    y, grad = values_and_gradients(lrn.compiled_lrn, x)
    y_ref, grad_ref = values_and_gradients(reference_lrn, x)
    assert y.shape == shape and y.dtype == tf.float32
    np.testing.assert_allclose(y, y_ref, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(grad, grad_ref, rtol=1e-4, atol=1e-5)
    # Not the identity: the window does normalise (x of 3 gives d well above 1).
    assert np.abs(y - x).max() > 1e-3


@pytest.mark.parametrize("radius,depth", [(0, 64), (1, 64), (7, 40), (20, 64), (32, 33),
                                          (3, 1024)])
def test_the_op_computes_tensorflows_lrn_for_any_window_and_depth(radius, depth):
    # The window moves across the kernel's vectors (16, 8 or 4 channels wide), wider
    # than one where the radius is 20 or 32, and past a depth that is not a multiple.
    x = 3.0 * tf.random.stateless_normal([3, 5, depth], seed=(radius, depth))
    attrs = dict(depth_radius=radius, bias=2.0, alpha=0.01)
    upstream = tf.sin(x)
    y = ops.load().cifar10_lrn(x, Tout=tf.float32, **attrs)
    dx = ops.load().cifar10_lrn_grad(x, upstream, **attrs)
    y_tf = tf.nn.local_response_normalization(x[None], beta=0.75, **attrs)[0]
    dx_tf = tf.raw_ops.LRNGrad(input_grads=upstream[None], input_image=x[None],
                               output_image=y_tf[None], beta=0.75, **attrs)[0]
    np.testing.assert_allclose(y, y_tf, rtol=2e-6, atol=1e-6)
    np.testing.assert_allclose(dx, dx_tf, rtol=1e-4, atol=2e-6 * np.abs(dx_tf).max())


@pytest.mark.parametrize("scale,bias", [(1e12, 1.0), (1e14, 1.0), (1e-12, 1e-20)])
def test_the_op_keeps_its_precision_where_d_is_very_large_or_small(scale, bias):
    # d = bias + alpha * sum x^2 from about 1e-21 to 1e26: d^-7/4 alone would under- or
    # overflow float32 in the gradient; the kernel never forms it.
    x = scale * tf.random.stateless_normal([2, 3, 64], seed=(3, 3))
    upstream = tf.cos(x / scale)
    attrs = dict(depth_radius=4, bias=bias, alpha=0.01)
    dx = ops.load().cifar10_lrn_grad(x, upstream, **attrs)
    y = ops.load().cifar10_lrn(x, Tout=tf.float32, **attrs)
    y_tf = tf.nn.local_response_normalization(x[None], beta=0.75, **attrs)[0]
    dx_tf = tf.raw_ops.LRNGrad(input_grads=upstream[None], input_image=x[None],
                               output_image=y_tf[None], beta=0.75, **attrs)[0]
    assert np.isfinite(dx).all() and np.isfinite(y).all()
    np.testing.assert_allclose(y, y_tf, rtol=1e-5, atol=1e-5 * np.abs(y_tf).max())
    np.testing.assert_allclose(dx, dx_tf, rtol=1e-3, atol=1e-5 * np.abs(dx_tf).max())


@pytest.mark.parametrize("dtype", [tf.bfloat16, tf.float16])
def test_a_reduced_precision_input_is_normalised_in_float32_and_given_back_in_its_type(dtype):
    x = tf.cast(3.0 * tf.random.stateless_normal([2, 3, 3, 64], seed=(5, 6)), dtype)
    y, grad = values_and_gradients(lrn.compiled_lrn, x)
    y_fast, grad_fast = values_and_gradients(fast_lrn, x)
    assert y.dtype == dtype and grad.dtype == dtype
    # The same float32 arithmetic up to its rounding, then one rounding to `dtype`.
    assert np.mean(np.asarray(tf.cast(y, tf.float32)) == np.asarray(tf.cast(y_fast, tf.float32))) > 0.99
    np.testing.assert_allclose(tf.cast(grad, tf.float32), tf.cast(grad_fast, tf.float32),
                               rtol=2e-2, atol=1e-3)


@pytest.mark.parametrize("dtypes", [(tf.float32, tf.bfloat16), (tf.bfloat16, tf.float32),
                                    (tf.bfloat16, tf.bfloat16), (tf.float16, tf.bfloat16)])
def test_the_kernel_reads_and_writes_the_types_it_is_given(dtypes):
    # Under --use_bf16, norm1 takes float32 and hands bfloat16 to conv2, norm2 the other
    # way: the kernel casts as it reads and writes, as tf.cast would around it.
    in_dtype, out_dtype = dtypes
    x = tf.cast(3.0 * tf.random.stateless_normal([2, 4, 4, 64], seed=(8, 9)), in_dtype)
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(x)
        y = lrn.compiled_lrn(x, out_dtype)
        y_ops = fast_lrn(x, out_dtype)
        weights = tf.cast(tf.sin(tf.cast(x, tf.float32)), out_dtype)
        loss, loss_ops = tf.reduce_sum(y * weights), tf.reduce_sum(y_ops * weights)
    grad, grad_ops = tape.gradient(loss, x), tape.gradient(loss_ops, x)
    assert y.dtype == out_dtype and grad.dtype == in_dtype
    as32 = lambda t: np.asarray(tf.cast(t, tf.float32))  # noqa: E731
    if out_dtype == tf.bfloat16:  # the same float32 value, rounded once
        assert np.mean(as32(y) == as32(y_ops)) > 0.99
    np.testing.assert_allclose(as32(y), as32(y_ops), rtol=1e-2 if out_dtype == tf.bfloat16
                               else 1e-5, atol=1e-6)
    np.testing.assert_allclose(as32(grad), as32(grad_ops), rtol=2e-2, atol=1e-3)


def bias_relu_lrn_and_gradients(function, z, bias, dtype):
    with tf.GradientTape() as tape:
        tape.watch([z, bias])
        y = function(z, bias, dtype)
        weights = tf.sin(tf.reshape(tf.range(tf.size(y), dtype=tf.float32), y.shape))
        loss = tf.reduce_sum(tf.cast(y, tf.float32) * weights)
    return (y, *tape.gradient(loss, [z, bias]))


def tf_bias_relu_lrn(z, bias, dtype):
    return fast_lrn(tf.nn.relu(tf.cast(z, tf.float32) + bias), dtype)


@pytest.mark.parametrize("shape", [[4, 6, 6, 64], [3, 2, 5, 100], [2, 1, 1, 3]])
def test_the_bias_relu_kernel_computes_lrn_of_the_relu_and_the_bias_gradient(shape):
    # conv2's depth; a depth of whole vectors and a rest; fewer channels than a vector.
    z = 3.0 * tf.random.stateless_normal(shape, seed=(6, len(shape)))
    bias = tf.random.stateless_normal(shape[-1:], seed=(7, 8))
    y, dz, dbias = bias_relu_lrn_and_gradients(lrn.compiled_bias_relu_lrn, z, bias, None)
    y_ref, dz_ref, dbias_ref = bias_relu_lrn_and_gradients(tf_bias_relu_lrn, z, bias,
                                                           tf.float32)
    assert y.shape == shape and y.dtype == tf.float32 and dbias.shape == shape[-1:]
    np.testing.assert_allclose(y, y_ref, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(dz, dz_ref, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(dbias, dbias_ref, rtol=1e-4, atol=1e-4)
    # The ReLU passes no gradient where z + bias <= 0, and some does pass elsewhere.
    below = (z + bias <= 0).numpy()
    assert below.any() and not below.all()
    assert (dz.numpy()[below] == 0).all() and (dz.numpy()[~below] != 0).any()


@pytest.mark.parametrize("dtypes", [(tf.bfloat16, tf.float32), (tf.bfloat16, tf.bfloat16),
                                    (tf.float32, tf.bfloat16), (tf.float16, tf.float32)])
def test_the_bias_relu_kernel_reads_and_writes_the_types_it_is_given(dtypes):
    # Under --use_bf16 norm2 reads conv2's bfloat16 output and hands pool2 float32.
    in_dtype, out_dtype = dtypes
    z = tf.cast(3.0 * tf.random.stateless_normal([2, 4, 4, 64], seed=(9, 1)), in_dtype)
    bias = tf.random.stateless_normal([64], seed=(9, 2))
    y, dz, dbias = bias_relu_lrn_and_gradients(lrn.compiled_bias_relu_lrn, z, bias, out_dtype)
    y_ref, dz_ref, dbias_ref = bias_relu_lrn_and_gradients(tf_bias_relu_lrn, z, bias,
                                                           out_dtype)
    assert y.dtype == out_dtype and dz.dtype == in_dtype and dbias.dtype == tf.float32
    as32 = lambda t: np.asarray(tf.cast(t, tf.float32))  # noqa: E731
    # z + bias and the ReLU in float32 as TensorFlow's float32 ops, LRN in float32,
    # then one rounding to the output's type.
    if out_dtype == tf.bfloat16:
        assert np.mean(as32(y) == as32(y_ref)) > 0.99
    np.testing.assert_allclose(as32(y), as32(y_ref), rtol=1e-2 if out_dtype == tf.bfloat16
                               else 1e-5, atol=1e-6)
    np.testing.assert_allclose(as32(dz), as32(dz_ref), rtol=2e-2, atol=1e-3)
    np.testing.assert_allclose(dbias, dbias_ref, rtol=2e-2, atol=2e-2)


def test_the_bias_gradient_is_the_same_however_the_batch_is_shared_out():
    # Summed image by image in a fixed order: repeated runs give the same bits (a sum
    # in the order the threads finish would differ in most runs of a batch this
    # size), and the sum is that of each image's own gradient.
    z = tf.random.stateless_normal([128, 12, 12, 64], seed=(2, 5))
    bias = tf.random.stateless_normal([64], seed=(2, 6))
    upstream = tf.random.stateless_normal([128, 12, 12, 64], seed=(2, 7))

    def bias_gradient(images):
        with tf.GradientTape() as tape:
            tape.watch(bias)
            y = lrn.compiled_bias_relu_lrn(z[images], bias)
        return tape.gradient(y, bias, output_gradients=upstream[images])

    first = bias_gradient(slice(None))
    for _ in range(5):
        np.testing.assert_array_equal(bias_gradient(slice(None)), first)
    each = sum(bias_gradient(slice(i, i + 1)) for i in range(0, 128))
    np.testing.assert_allclose(first, each, rtol=1e-4, atol=1e-3)


def test_a_nan_gradient_stays_nan_where_the_relu_is_off():
    # As TensorFlow's ReLU gradient, which multiplies by its mask.
    z = tf.constant([[[-1.0, 2.0, -3.0]]])
    upstream = tf.constant([[[np.nan, 1.0, 1.0]]])
    with tf.GradientTape() as tape:
        tape.watch(z)
        y = lrn.compiled_bias_relu_lrn(z, tf.zeros([3]))
    dz = tape.gradient(y, z, output_gradients=upstream).numpy()
    assert np.isnan(dz[0, 0, 0])  # (and, through the window's sums, its neighbours)


def test_the_bias_relu_op_refuses_a_bias_of_another_length():
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match="Cifar10BiasReluLrn: z must have a batch axis and conv_bias "
                             "one value per channel"):
        lrn.compiled_bias_relu_lrn(tf.ones([2, 3, 3, 8]), tf.ones([7]))


@pytest.mark.parametrize("dtype", [tf.float32, tf.bfloat16])
def test_a_model_with_conv2s_bias_and_relu_in_norm2_computes_the_model_without(dtype):
    without, kernel = (model_pairs.run(compute_dtype=dtype, lrn=lrn.compiled_lrn,
                                       relu_pool=compiled_relu_pool, relu_lrn=relu_lrn)
                       for relu_lrn in (None, lrn.compiled_bias_relu_lrn))
    assert kernel.stage_types == without.stage_types  # each layer's output in the same precision
    if dtype == tf.float32:  # the same function, to float32's rounding
        model_pairs.assert_same_function(kernel, without, "conv2", atol=1e-6)
    else:  # z + bias in float32 with the kernel, in bfloat16 without
        assert kernel.activations["conv2"].dtype == tf.float32
        model_pairs.assert_bfloat16_agreement(kernel, without)


def test_a_model_step_with_the_kernel_equals_one_with_tensorflows_ops():
    tf_ops, kernel = (model_pairs.run(lrn=function) for function in (fast_lrn, lrn.compiled_lrn))
    model_pairs.assert_same_function(kernel, tf_ops, "conv2", atol=1e-5)  # after norm1


def test_the_op_refuses_more_channels_than_it_holds():
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match="the last axis may hold 1 to 1024 channels"):
        lrn.compiled_lrn(tf.ones([2, 1025]))


def test_choose_takes_the_kernel_on_cpus_and_tensorflows_ops_on_gpus_or_under_xla():
    chosen = choice.choose("auto", [CPU, CPU], xla=False)
    assert chosen == (lrn.compiled_lrn, compiled_relu_pool, lrn.compiled_bias_relu_lrn,
                      "compiled", "CPU replicas")
    assert choice.choose("compiled", [CPU], xla=False).kernel == "compiled"
    assert choice.choose("tensorflow", [CPU], xla=False)[:4] == (fast_lrn, None, None,
                                                                 "tensorflow")
    on_gpu = choice.choose("auto", [GPU], xla=False)
    assert on_gpu[:4] == (fast_lrn, None, None, "tensorflow") and "GPUs" in on_gpu.reason
    assert choice.choose("auto", [CPU], xla=True).reason == "XLA cannot compile the kernels (--xla)"
    with pytest.raises(Cifar10Error, match=r"^--kernels=compiled cannot run here: the "
                                           r"replicas are GPUs .*; use --kernels=auto$"):
        choice.choose("compiled", [GPU], xla=False)
    with pytest.raises(Cifar10Error, match="^--kernels must be one of auto, compiled, "
                                           "tensorflow, got 'fast'$"):
        choice.choose("fast", [CPU], xla=False)


# The tests' own kernel cache (conftest.py), before ``fresh`` empties it for a test.
SHARED_CACHE = os.environ[build.CACHE_ENV]


@pytest.fixture
def fresh(monkeypatch, tmp_path):
    """An empty kernel cache, and a process that has not loaded the kernel yet."""
    monkeypatch.setenv(build.CACHE_ENV, str(tmp_path / "cache"))
    monkeypatch.setattr(ops, "_loaded", {})
    return tmp_path / "cache"


def test_without_a_compiler_auto_falls_back_and_compiled_is_one_line(fresh, monkeypatch):
    monkeypatch.setenv("CXX", "/nonexistent/c++")
    chosen = choice.choose("auto", [CPU], xla=False)
    assert chosen[:4] == (fast_lrn, None, None, "tensorflow")
    assert chosen.reason.startswith("cannot run the C++ compiler /nonexistent/c++: ")
    with pytest.raises(Cifar10Error, match=r"^--kernels=compiled: cannot run the C\+\+ "
                                           r"compiler /nonexistent/c\+\+: .*; or use "
                                           r"--kernels=auto, which falls back to "
                                           r"TensorFlow's ops$"):
        choice.choose("compiled", [CPU], xla=False)
    monkeypatch.delenv("CXX")
    monkeypatch.setenv("PATH", str(fresh))  # no compiler on it
    with pytest.raises(build.KernelBuildError,
                       match=r"^no C\+\+ compiler found \(install g\+\+, or set CXX\)$"):
        build.library("cifar10_lrn", ["lrn_rows.cc"], ["lrn_op.cc"])
    assert not fresh.exists() or not os.listdir(fresh)


def test_a_build_is_kept_and_reused_and_a_changed_source_builds_anew(fresh, monkeypatch,
                                                                       tmp_path):
    # A small library of its own: the cache's rules, without the kernels' compile time.
    sources = tmp_path / "src"
    sources.mkdir()
    (sources / "rows.h").write_text("int rows();\n")
    (sources / "rows.cc").write_text('#include "rows.h"\nint rows() { return 24; }\n')
    monkeypatch.setattr(build, "SOURCE_DIR", sources)
    first = build.library("cifar10_rows", ["rows.cc"], [])
    assert first.parent == fresh and first.name.startswith("cifar10_rows-")
    assert os.listdir(fresh) == [first.name]  # no temporary folder left
    built_at = first.stat().st_mtime_ns

    def no_compiler(command, what):
        raise AssertionError(f"compiled again: {what}")

    with monkeypatch.context() as no_build:
        no_build.setattr(build, "_run", no_compiler)
        assert build.library("cifar10_rows", ["rows.cc"], []) == first
    assert first.stat().st_mtime_ns == built_at
    # Another source is another library, beside the first.
    (sources / "rows.cc").write_text((sources / "rows.cc").read_text() + "\n// edit\n")
    second = build.library("cifar10_rows", ["rows.cc"], [])
    assert second != first and sorted(os.listdir(fresh)) == sorted([first.name, second.name])
    # So is a changed header that a source includes.
    (sources / "rows.h").write_text((sources / "rows.h").read_text() + "\n// edit\n")
    third = build.library("cifar10_rows", ["rows.cc"], [])
    assert third not in (first, second) and len(os.listdir(fresh)) == 3


def test_a_source_that_does_not_compile_is_one_line_and_leaves_nothing(fresh, monkeypatch,
                                                                       tmp_path):
    sources = tmp_path / "src"
    sources.mkdir()
    (sources / "broken.cc").write_text("int f() { return undeclared_name; }\n")
    monkeypatch.setattr(build, "SOURCE_DIR", sources)
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


def test_the_trainer_records_which_kernels_it_ran(trained_run):
    train_dir, _ = trained_run
    assert records.last_record(str(train_dir))["kernels"] == {"kernel": "compiled",
                                                              "reason": "CPU replicas"}


def test_cifar10_train_without_a_compiler(tmp_path, learnable_files):
    files, _ = learnable_files
    data_dir = os.path.dirname(os.path.dirname(files[0]))
    common = [f"--data_dir={data_dir}", "--max_steps=2", "--batch_size=8", "--log_frequency=1"]
    env = {build.CACHE_ENV: str(tmp_path / "empty-cache"), "CXX": "/nonexistent/c++"}
    forced = run("cifar10-train", f"--train_dir={tmp_path / 'forced'}",
                 "--kernels=compiled", *common, **env)
    assert forced.returncode == 1
    assert forced.stderr.strip().splitlines()[-1].startswith(
        "cifar10-train: error: --kernels=compiled: cannot run the C++ compiler "
        "/nonexistent/c++: ")
    assert not os.path.exists(tmp_path / "forced" / "checkpoint")
    # auto trains with TensorFlow's ops, without a word, and says why in the record.
    auto = run("cifar10-train", f"--train_dir={tmp_path / 'auto'}", *common, **env)
    assert auto.returncode == 0, auto.stderr
    assert "warning" not in auto.stderr + auto.stdout
    record = records.last_record(str(tmp_path / "auto"))
    assert record["kernels"]["kernel"] == "tensorflow"
    assert record["kernels"]["reason"].startswith("cannot run the C++ compiler /nonexistent/c++")


def test_cxx_may_carry_arguments_like_a_compiler_launcher(fresh, monkeypatch, tmp_path):
    monkeypatch.delenv("CXX", raising=False)
    monkeypatch.setenv("CXX", f"env CIFAR10_TEST=1 {shlex.join(build.compiler())}")
    assert build.compiler()[:2] == ["env", "CIFAR10_TEST=1"]
    # Small sources of both kinds (the CPU's and TensorFlow's flags), fast to build.
    sources = tmp_path / "src"
    sources.mkdir()
    (sources / "rows.cc").write_text("int rows() { return 24; }\n")
    (sources / "op.cc").write_text("int rows();\nint op() { return rows(); }\n")
    monkeypatch.setattr(build, "SOURCE_DIR", sources)
    path = build.library("cifar10_op", ["rows.cc"], ["op.cc"])
    assert path.parent == fresh and path.is_file()


def test_a_library_that_does_not_load_is_one_line_saying_to_delete_it(fresh, monkeypatch):
    # The library's name comes from the tests' own cache (built once for all of them),
    # so that this test need not build it again in its empty one.
    with monkeypatch.context() as shared:
        shared.setenv(build.CACHE_ENV, SHARED_CACHE)
        built = build.library(ops.NAME, ops.NATIVE_SOURCES, ops.TF_SOURCES)
    fresh.mkdir(parents=True)
    path = fresh / built.name
    path.write_bytes(b"not a shared library")
    chosen = choice.choose("auto", [CPU], xla=False)
    assert chosen.kernel == "tensorflow"
    assert chosen.reason.startswith(f"cannot load the compiled kernels {path} (")
    assert chosen.reason.endswith("); delete the file to have it built again")
