"""Tests of cifar10.cli.flags and cifar10.core.config: the flags are made from the config
fields, and their mistakes are one line in the program's words."""

from __future__ import annotations

import dataclasses
import pathlib

import pytest
from absl import flags

from cifar10.core import config
from cifar10.cli import flags as cifar10_flags
from cifar10.cli import helptext


def flags_of(config_class):
    values = flags.FlagValues()
    cifar10_flags.define_config_flags(config_class, values)
    return values


@pytest.mark.parametrize("config_class", [config.TrainConfig, config.EvalConfig])
def test_each_setting_is_a_flag_of_its_name_default_and_help(config_class):
    values = flags_of(config_class)
    fields = config.flag_fields(config_class)
    assert sorted(values) == sorted(f.name for f in fields)
    for field in fields:
        flag = values[field.name]
        assert flag.help.endswith(field.metadata["help"]) and field.metadata["help"]
        if field.default is not dataclasses.MISSING:
            assert flag.default == field.default, field.name


def test_the_original_flag_names_and_defaults():
    train_flags, eval_flags = flags_of(config.TrainConfig), flags_of(config.EvalConfig)
    assert {name: train_flags[name].default for name in train_flags} == {
        "train_dir": "/tmp/cifar10_train", "batch_size": 128, "max_steps": 1_000_000,
        "log_frequency": 10, "steps_per_loop": 100, "checkpoint_steps": 1000,
        "keep_checkpoints": 5,
        "summary_steps": 100, "seed": 0, "use_fp16": False, "use_bf16": False, "xla": False,
        "kernels": "auto",
        "step_timeout_secs": 300, "replicas_per_gpu": 1, "all_reduce": "auto",
        "deterministic": False, "fresh_start": False,
        # The tutorial's hyperparameters, its values; and when to stop or validate.
        "learning_rate": 0.1, "learning_rate_decay_factor": 0.1, "num_epochs_per_decay": 350,
        "moving_average_decay": 0.9999, "weight_decay": 0.004, "max_epochs": None,
        "eval_every_steps": 0}
    assert eval_flags["checkpoint_dir"].default == "/tmp/cifar10_train"
    assert eval_flags["eval_dir"].default == "/tmp/cifar10_eval"
    assert eval_flags["eval_interval_secs"].default == 300
    assert eval_flags["num_examples"].default == 10_000
    assert eval_flags["weights"].parser.enum_values == list(config.WEIGHTS)
    assert eval_flags["eval_data"].parser.enum_values == ["test", "train_eval"]


def test_a_config_from_the_command_line():
    values = flags_of(config.TrainConfig)
    values(["cifar10-train", "--checkpoint_steps=7", "--fresh_start", "--batch_size=16"])
    made = cifar10_flags.config_from_flags(config.TrainConfig, values, shuffle_buffer=50)
    assert made == config.TrainConfig(train_dir="/tmp/cifar10_train", checkpoint_steps=7,
                                      fresh_start=True, batch_size=16, shuffle_buffer=50)


@pytest.mark.parametrize("config_class", [config.TrainConfig, config.EvalConfig])
def test_fp16_and_bf16_exclude_each_other(config_class):
    values = flags_of(config_class)
    with pytest.raises(flags.IllegalFlagValueError,
                       match="use_fp16 and use_bf16 exclude each other"):
        values(["cifar10", "--use_fp16", "--use_bf16"])
    required = {"train_dir": "t"} if config_class is config.TrainConfig else {
        "checkpoint_dir": "c", "eval_dir": "e"}
    made = {mode: config.compute_dtype(config_class(**required, use_fp16=fp16, use_bf16=bf16))
            for mode, (fp16, bf16) in {"none": (False, False), "fp16": (True, False),
                                         "bf16": (False, True)}.items()}
    assert made == {"none": "float32", "fp16": "float16", "bf16": "bfloat16"}
    with pytest.raises(ValueError, match="use_fp16 and use_bf16 exclude each other"):
        config.compute_dtype(config_class(**required, use_fp16=True, use_bf16=True))


def test_the_library_refuses_deterministic_with_xla_before_anything_is_built():
    """TensorFlow has no deterministic XLA max-pooling gradient: the first step failed,
    after the start was recorded."""
    for deterministic, xla in [(True, False), (False, True), (False, False)]:
        config.TrainConfig(train_dir="t", deterministic=deterministic, xla=xla).check()
    with pytest.raises(ValueError, match="^--deterministic and --xla exclude each other: "):
        config.TrainConfig(train_dir="t", deterministic=True, xla=True).check()


@pytest.mark.parametrize("define, argv, line", [
    ("train", ["--max_steps=ten"], "--max_steps=ten: expected a whole number"),
    ("train", ["--max_steps=1.5"], "--max_steps=1.5: expected a whole number"),
    ("train", ["--batch_size=0"], "--batch_size=0: must be a whole number of at least 1"),
    ("train", ["--num_gpus=-1"], "--num_gpus=-1: must be a whole number of at least 0"),
    ("train", ["--slurm_port_base=5"], "--slurm_port_base=5: must be a whole number in the "
                                       "range [1024, 65000]"),
    ("train", ["--dataset=cifar100", "--synthetic_data"],
     "--synthetic_data generates CIFAR-10-format data: drop --dataset=cifar100 or "
     "--synthetic_data"),
    ("train", ["--deterministic", "--xla"], "--deterministic and --xla exclude each other: "
                                            "XLA has no deterministic max-pooling gradient; "
                                            "drop one"),
    ("train", ["--max_step=3"], "unknown flag --max_step (did you mean --max_steps?)"),
    ("train", ["--zzz=3"], "unknown flag --zzz"),
    ("train", ["--synthetic_data=maybe"], "--synthetic_data=maybe: expected true or false"),
    ("train", ["--strategy=zz"], "--strategy=zz: must be one of auto, mirrored, multi_worker, "
                                 "one_device"),
    ("train", ["--batch_size"], "--batch_size needs a value (--batch_size=VALUE)"),
    ("train", ["--seed=-1"], "--seed=-1: must be a whole number in the range "
                             "[0, 9223372036854775807]"),
    ("train", [f"--seed={2**63}"], f"--seed={2**63}: must be a whole number in the range "
                                   "[0, 9223372036854775807]"),
    ("prepare", ["--seed=-1"], "--seed=-1: must be a whole number of at least 0"),
    ("eval", ["--eval_timeout=-1"], "--eval_timeout=-1: must be a number of at least 0"),
    ("eval", ["--eval_interval_secs=abc"], "--eval_interval_secs=abc: expected a number"),
])
def test_flag_mistakes_are_worded_as_the_programs_words(define, argv, line):
    values = flags.FlagValues()
    getattr(cifar10_flags, f"define_{define}_flags")(values)
    with pytest.raises(flags.Error) as raised:
        values([f"cifar10-{define}", *argv])
    assert cifar10_flags.flag_error_text(raised.value) == line


@pytest.mark.parametrize("program", helptext.HELP_TOPICS)
def test_help_lists_each_flag_of_a_program_under_one_topic(program):
    values = flags.FlagValues()
    getattr(cifar10_flags, f"define_{program.split('-')[1]}_flags")(values)
    _, page, topics = helptext.HELP_TOPICS[program]
    listed = [name for _, names in topics for name in names.split()]
    assert sorted(listed) == sorted(flag.name for flag in
                                    values.get_flags_for_module(cifar10_flags.__name__))
    assert (pathlib.Path(__file__).parent.parent / page).is_file()
