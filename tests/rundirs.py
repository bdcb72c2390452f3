"""Helpers of the run-directory tests: a trained run's copy with a user's files beside
it, snapshots, the leftovers of saves cut short, a small training config."""

from __future__ import annotations

import os
import shutil
import uuid

import tensorflow as tf

from cifar10.core.config import TrainConfig
from cifar10.runs.best import BestCheckpoint
from cifar10.training.step import TrainState

# A user's files that merely start like the trainer's: nothing may touch them.
USER_FILES = ("model.ckpt-best.txt", "model.ckpt-10.index.bak",
              "events.out.tfevents.my_notes.txt", "checkpoint.txt", "notes.txt",
              "class_names.txt.bak", "flags.txt.tmp", "class_names.txt.tmp")


def copy_run(trained, copy):
    """A copy of the run directory ``trained`` at ``copy``, with USER_FILES beside it."""
    shutil.copytree(trained, copy)
    for name in USER_FILES:
        (copy / name).write_text("mine")
    return copy


def snapshot(directory):
    """{name: (size, mtime)} of every file under ``directory``."""
    out = {}
    for root, _, names in os.walk(directory):
        for name in names:
            path = os.path.join(root, name)
            out[os.path.relpath(path, directory)] = (os.path.getsize(path),
                                                     os.stat(path).st_mtime_ns)
    return out


def truncate(path):
    with open(path, "r+b") as f:
        f.truncate(os.path.getsize(path) // 2)


def leave_an_interrupted_save(train_dir, step):
    """What a kill during TensorFlow's save of ``step`` leaves behind."""
    temp = train_dir / f"model.ckpt-{step}_temp"
    temp.mkdir()
    (temp / "part-00000-of-00001.data-00000-of-00001").write_bytes(b"\0" * 1000)
    (train_dir / f"checkpoint.tmp{uuid.uuid4().hex}").write_text("half")


def leave_a_save_cut_in_place(train_dir, step, source, index_written):
    """What a kill leaves while TensorFlow puts the checkpoint of ``step`` (``source``'s
    files) in place: the shard's data moved out of model.ckpt-<step>_temp/, the .index
    cut to its first ``index_written`` bytes (None: not begun)."""
    temp = train_dir / f"model.ckpt-{step}_temp"
    temp.mkdir()
    shutil.copy(f"{source}.index", temp / "part-00000-of-00001.index")
    shutil.copy(f"{source}.data-00000-of-00001",
                train_dir / f"model.ckpt-{step}.data-00000-of-00001")
    if index_written is not None:
        with open(f"{source}.index", "rb") as f:
            (train_dir / f"model.ckpt-{step}.index").write_bytes(f.read()[:index_written])


def keep_best(run_dir, step):
    """best/ in ``run_dir`` as the trainer keeps it, of the run's checkpoint of ``step``."""
    state = TrainState(seed=0, compute_dtype=tf.float32)
    state.checkpoint().read(str(run_dir / f"model.ckpt-{step}")).expect_partial()
    assert BestCheckpoint(str(run_dir), state.checkpoint(), step).offer(step, 0.5, 1.0)
    return run_dir / "best"


def config(train_dir, **overrides):
    """A short training run's config: batch 16, 30 steps, a checkpoint every 10."""
    settings = dict(train_dir=str(train_dir), batch_size=16, max_steps=30, log_frequency=1,
                    checkpoint_steps=10, summary_steps=1000, shuffle_buffer=200)
    settings.update(overrides)
    return TrainConfig(**settings)
