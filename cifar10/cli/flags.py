"""The programs' absl flags, their rules, a flag mistake as one line, and a run's
flags.txt text.  ``config.TrainConfig``'s and ``EvalConfig``'s settings get one flag
per field; the programs' own flags (data, devices, output) are written out here.
No TensorFlow here.
"""

from __future__ import annotations

import os
import re
import shlex
from typing import Any, Sequence

from absl import flags

from cifar10.core import config
from cifar10.data import fileformat as ff
from cifar10.distribute import cluster
from cifar10.runs import layout

# Flags whose being unset is not their default (Flag.present): flags.txt comments them out.
UNSET_IS_NOT_DEFAULT = ("num_gpus", "num_examples")

PATH_FLAGS = ("train_dir", "eval_dir", "checkpoint_dir", "checkpoint", "data_dir",
              "export_dir", "image_dir", "model")

# Former names of flags, so that an older run's flags.txt still replays.
FORMER_NAMES = {"lrn_kernel": "kernels"}

RECORDING_PROGRAMS = ("cifar10-train", "cifar10-eval")

# Rules the data flags keep together: (flags, rule on their values, what breaks it).
DATA_RULES = (
    (("dataset", "label"), lambda v: v["dataset"] == ff.CIFAR100.name or v["label"] == "fine",
     "--label=coarse applies to --dataset=cifar100 only"),
    (("dataset", "synthetic_data"),
     lambda v: not (v["dataset"] == ff.CIFAR100.name and v["synthetic_data"]),
     "--synthetic_data generates CIFAR-10-format data: drop --dataset=cifar100 or "
     "--synthetic_data"),
)

# Settings that exclude each other, two by two: (their flags, the error that says so).
EXCLUSIVE_PAIRS = (
    (("use_fp16", "use_bf16"), config.PRECISION_CONFLICT),
    (("deterministic", "xla"), config.DETERMINISTIC_XLA_CONFLICT),
)


def broken_data_rule(flag_values: flags.FlagValues) -> str | None:
    """The message of the first of ``DATA_RULES`` the flags' values break, or None."""
    for names, rule, message in DATA_RULES:
        if not rule({name: flag_values[name].value for name in names}):
            return message
    return None


def define_data_flags(flag_values: flags.FlagValues = flags.FLAGS,
                      rules_when_parsed: bool = True) -> None:
    """Where cifar10-train and cifar10-eval find their data; ``rules_when_parsed``:
    check ``DATA_RULES`` at parsing (the evaluator checks them once it took its run's)."""
    flags.DEFINE_string("data_dir", "/tmp/cifar10_data",
                        "Path to the data directory; the data is downloaded and "
                        "extracted there when missing.", flag_values=flag_values)
    flags.DEFINE_enum("dataset", ff.CIFAR10.name, sorted(ff.ARCHIVES),
                      "The data set: cifar10, or cifar100 (100 classes, or 20 superclasses "
                      "with --label=coarse).", flag_values=flag_values)
    flags.DEFINE_enum("label", "fine", sorted(ff.CIFAR100_LABELS),
                      "With --dataset=cifar100: train on its fine labels (100 classes) or its "
                      "coarse ones (20 superclasses).", flag_values=flag_values)
    flags.DEFINE_string("data_url", None,
                        f"Where to download the data set's tarball from when --data_dir lacks "
                        f"it (http, https or file://). Default for cifar10: "
                        f"${ff.DATA_URL_ENV}, else {ff.DATA_URL}; for cifar100: "
                        f"{ff.CIFAR100.url}.", flag_values=flag_values)
    flags.DEFINE_string("data_md5", None,
                        f"Expected MD5 of the tarball at --data_url, for a mirror of other "
                        f"data (default: the official one, for cifar10 {ff.TARBALL_MD5} with "
                        f"its size, for cifar100 {ff.CIFAR100.md5}).", flag_values=flag_values)
    flags.DEFINE_boolean("synthetic_data", False,
                         "Use generated CIFAR-format data (in <data_dir>/synthetic) instead "
                         "of the real data set: to try the toolkit offline. Not CIFAR-10.",
                         flag_values=flag_values)
    flags.DEFINE_integer("synthetic_records", 1000, "Records per file of the generated data "
                         "when --synthetic_data is set.", lower_bound=1, flag_values=flag_values)
    if rules_when_parsed:
        for names, rule, message in DATA_RULES:
            flags.register_multi_flags_validator(list(names), rule, message=message,
                                                 flag_values=flag_values)


def define_config_flags(config_class: type, flag_values: flags.FlagValues = flags.FLAGS) -> None:
    """One flag per setting of ``config_class`` (``config.setting``), named as the field."""
    define = {"flag_values": flag_values}
    for field in config.flag_fields(config_class):
        meta = field.metadata
        name, default, help_ = field.name, meta["flag_default"], meta["help"]
        bounds = {k: meta[k] for k in ("lower_bound", "upper_bound") if meta[k] is not None}
        kind = str(field.type)
        if meta["choices"]:
            flags.DEFINE_enum(name, default, list(meta["choices"]), help_, **define)
        elif kind.startswith("bool"):
            flags.DEFINE_boolean(name, default, help_, **define)
        elif kind.startswith("int"):
            flags.DEFINE_integer(name, default, help_, **bounds, **define)
        elif kind.startswith("float"):
            flags.DEFINE_float(name, default, help_, **bounds, **define)
        elif kind.startswith("str"):
            flags.DEFINE_string(name, default, help_, **define)
        else:
            raise TypeError(f"no flag type for {config_class.__name__}.{name}: {kind}")
        if meta["above"] is not None:
            flags.register_validator(name, lambda v, above=meta["above"]: v is None or v > above,
                                     f"must be a number above {meta['above']}", **define)
    for pair, message in EXCLUSIVE_PAIRS:
        if all(name in flag_values for name in pair):
            flags.register_multi_flags_validator(
                list(pair), lambda values: not all(values.values()), message=message,
                flag_values=flag_values)


def config_from_flags(config_class: type, values: flags.FlagValues, **others: Any):
    """A ``config_class`` with the flags' values; ``others`` set the rest or override."""
    settings = {f.name: values[f.name].value for f in config.flag_fields(config_class)}
    return config_class(**{**settings, **others})


def define_tf32_flag(flag_values: flags.FlagValues = flags.FLAGS) -> None:
    flags.DEFINE_boolean("allow_tf32", False, "Let TensorFlow run float32 convolutions and "
                         "matmuls as TensorFloat-32 on GPUs that have it (Ampere, Hopper): "
                         "faster, but not float32 (see docs/training.md).", flag_values=flag_values)


class _StepWindowParser(flags.ArgumentParser):
    """--profile_steps: "FIRST,LAST" (or one step) as (first, last); "none" as None."""

    def parse(self, argument):
        if isinstance(argument, tuple):
            return argument
        return config.parse_profile_steps(argument)

    def flag_type(self) -> str:
        return "FIRST,LAST"


class _StepWindowSerializer(flags.ArgumentSerializer):
    def serialize(self, value) -> str:
        return f"{value[0]},{value[1]}"


def _window_within_max_steps(values: dict) -> bool:
    if values["profile_steps"] is not None:
        try:
            config.check_profile_steps(values["profile_steps"], values["max_steps"])
        except ValueError as e:
            raise flags.ValidationError(str(e)) from None
    return True


def define_train_flags(flag_values: flags.FlagValues = flags.FLAGS) -> None:
    """Flags of cifar10-train."""
    define_data_flags(flag_values)
    define_config_flags(config.TrainConfig, flag_values)
    for former, name in FORMER_NAMES.items():
        # In a module of its own name, so that flags.txt writes the flag's name only.
        flags.DEFINE_alias(former, name, flag_values=flag_values,
                           module_name=f"{__name__}.former_names")
    define_tf32_flag(flag_values)
    flags.DEFINE(_StepWindowParser(), "profile_steps", None,
                 "Trace steps FIRST to LAST (both included, e.g. 11,20) with TensorFlow's "
                 "profiler into <train_dir>/plugins/profile, for TensorBoard's Profile tab "
                 "(pip install 'cifar10[profile]'); none (the default): no trace.",
                 flag_values=flag_values, serializer=_StepWindowSerializer())
    flags.register_multi_flags_validator(["profile_steps", "max_steps"],
                                         _window_within_max_steps, flag_values=flag_values)
    flags.DEFINE_integer("num_gpus", 1, "How many GPUs (model replicas) to use: the first "
                         "visible ones (CUDA_VISIBLE_DEVICES picks which); 0 trains on the "
                         "CPU. Without GPUs, the replicas run on logical CPU devices.",
                         lower_bound=0, flag_values=flag_values)
    flags.DEFINE_boolean("log_device_placement", False, "Whether to log device placement.",
                         flag_values=flag_values)
    flags.DEFINE_enum("strategy", "auto", list(cluster.STRATEGIES),
                      "How replicas are distributed: auto is multi_worker when TF_CONFIG or "
                      "srun names several tasks, else mirrored (one replica per GPU of this "
                      "machine).",
                      flag_values=flag_values)
    flags.register_multi_flags_validator(
        ["strategy", "num_gpus"], lambda v: not (v["strategy"] == "one_device"
                                                 and (v["num_gpus"] or 0) > 1),
        message="--strategy=one_device trains one replica: drop --num_gpus (or give "
                "--num_gpus=1 after a --flagfile that sets it), or use --strategy=mirrored "
                "for several", flag_values=flag_values)
    flags.DEFINE_float("worker_timeout_secs", 300, "Multi-worker only: a worker waiting this "
                       "long for another one stops with an error instead of hanging.",
                       lower_bound=1, flag_values=flag_values)
    flags.DEFINE_integer("slurm_port_base", cluster.DEFAULT_PORT_BASE, "Under srun: the port "
                         "of each node's first task; task SLURM_LOCALID of a node listens on "
                         "this + SLURM_LOCALID.", lower_bound=1024, upper_bound=65000,
                         flag_values=flag_values)


def define_eval_flags(flag_values: flags.FlagValues = flags.FLAGS) -> None:
    """Flags of cifar10-eval."""
    define_data_flags(flag_values, rules_when_parsed=False)  # once it follows the run
    define_config_flags(config.EvalConfig, flag_values)
    define_tf32_flag(flag_values)
    define_checkpoint_rule(flag_values)
    flags.DEFINE_boolean("eval_on_cpu", False, "Evaluate on the CPU even when a GPU is "
                         "present, so as not to compete with training for GPU memory.",
                         flag_values=flag_values)
    flags.DEFINE_boolean("wait_for_run", False, "Polling: where --checkpoint_dir does not "
                         "exist yet, wait for cifar10-train to start there (for jobs that "
                         "start the evaluator first).", flag_values=flag_values)
    # --model scores once what was exported, its weights and precision fixed at export.
    others = ("checkpoint", "checkpoint_dir", "weights", "use_fp16", "use_bf16",
              "eval_interval_secs", "eval_timeout", "wait_for_run")
    defaults = {name: flag_values[name].default for name in others}

    def model_alone(values: dict[str, Any]) -> bool:
        given = [f"--{name}" for name in others if values[name] != defaults[name]]
        if values["model"] and given:
            raise flags.ValidationError(
                f"--model scores an exported model once, with the weights and precision it "
                f"was exported with: drop {', '.join(given)}")
        return True

    flags.register_multi_flags_validator(["model", *others], model_alone,
                                         flag_values=flag_values)


def define_predict_flags(flag_values: flags.FlagValues = flags.FLAGS) -> None:
    """Flags of cifar10-predict (the images are its arguments)."""
    _define_checkpoint_flags("Classify with", flag_values)
    flags.DEFINE_integer("top_k", 3, "How many classes to print per image, most probable "
                         "first (at most the number of classes the run was trained on).",
                         lower_bound=1, upper_bound=ff.MAX_CLASSES, flag_values=flag_values)
    flags.DEFINE_enum("output", "text", ["text", "jsonl", "csv"],
                      "text: one readable line per image; jsonl: one JSON object per line; "
                      "csv: a header row, then one row per image.", flag_values=flag_values)
    flags.DEFINE_integer("batch_size", 128, "Images classified at once.", lower_bound=1,
                         flag_values=flag_values)


TFLITE_CHOICES = ("float32", "float16", "dynamic", "int8")  # serving.export.TFLITE_FILES


class _SubsetParser(flags.ArgumentParser):
    """A comma-separated subset of ``choices`` as a list in their order; "true" (the flag
    alone): the first choice; "false" (--no<flag>): none."""

    def __init__(self, choices: Sequence[str]):
        self.choices = tuple(choices)

    def parse(self, argument):
        if not isinstance(argument, str):
            return list(argument)
        given = {"true": self.choices[:1], "false": ()}.get(argument, argument.split(","))
        if set(given) - set(self.choices):
            raise ValueError(f"choose among {','.join(self.choices)}, comma-separated")
        return [choice for choice in self.choices if choice in given]


class _SubsetFlag(flags.Flag):
    """A boolean flag (--name, --noname) that also takes a subset: --name=a,b."""

    def __init__(self, parser: _SubsetParser, name: str, help_: str):
        super().__init__(parser, None, name, [], help_, boolean=True)

    def _serialize(self, value) -> str:
        return f"--{self.name}={','.join(value)}" if value else f"--no{self.name}"


def define_export_flags(flag_values: flags.FlagValues = flags.FLAGS) -> None:
    """Flags of cifar10-export."""
    _define_checkpoint_flags("Export", flag_values)
    flags.DEFINE_string("export_dir", "/tmp/cifar10_export", "Where to write the SavedModel, "
                        "in a folder named after the checkpoint's step (as TensorFlow Serving "
                        "expects).", flag_values=flag_values)
    flags.DEFINE_flag(_SubsetFlag(
        _SubsetParser(TFLITE_CHOICES), "tflite", "Also write TFLite models of the "
        "predict_images signature into the export, a comma-separated subset of "
        f"{','.join(TFLITE_CHOICES)} (--tflite alone: float32, model.tflite).",
        ), flag_values=flag_values)
    flags.DEFINE_integer("calibration_images", 300, "--tflite=int8: how many images of the "
                         "run's training data calibrate it (the data the run recorded, as "
                         "cifar10-eval finds it; the data flags override).", lower_bound=1,
                         flag_values=flag_values)
    define_data_flags(flag_values, rules_when_parsed=False)  # once it follows the run
    flags.DEFINE_boolean("overwrite", False, "Replace an earlier export of the same step.",
                         flag_values=flag_values)


def _define_checkpoint_flags(verb: str, flag_values: flags.FlagValues) -> None:
    flags.DEFINE_string("checkpoint_dir", "/tmp/cifar10_train",
                        "Training run whose newest checkpoint that reads is used.",
                        flag_values=flag_values)
    flags.DEFINE_string("checkpoint", None, "A checkpoint to use instead of the newest of "
                        "--checkpoint_dir (a path such as runs/a/train/model.ckpt-1000, or "
                        "its .index file).",
                        flag_values=flag_values)
    flags.DEFINE_enum("weights", "averages", list(config.WEIGHTS),
                      f"{verb} the exponential moving averages of the weights (as the "
                      f"original's evaluation) or the raw trained weights.",
                      flag_values=flag_values)
    define_checkpoint_rule(flag_values)


def define_checkpoint_rule(flag_values: flags.FlagValues) -> None:
    """--checkpoint with a --checkpoint_dir that does not hold it is a flag error, not
    a --checkpoint_dir dropped without a word.  At its default --checkpoint_dir counts
    as not given (cifar10-eval's flags.txt records it so beside a --checkpoint)."""
    default = flag_values["checkpoint_dir"].default

    def rule(values: dict[str, Any]) -> bool:
        if values["checkpoint"] and values["checkpoint_dir"] != default:
            problem = layout.not_in_checkpoint_dir(values["checkpoint"],
                                                   values["checkpoint_dir"])
            if problem:
                raise flags.ValidationError(problem)
        return True

    flags.register_multi_flags_validator(["checkpoint", "checkpoint_dir"], rule,
                                         flag_values=flag_values)


def define_prepare_flags(flag_values: flags.FlagValues = flags.FLAGS) -> None:
    """Flags of cifar10-prepare (--image_dir and --data_dir it requires itself)."""
    flags.DEFINE_string("image_dir", None, "Folder with one subfolder of images per class "
                        "(or train/ beside test/, val/, valid/ or validation/, each holding "
                        "those, to keep a given split).", flag_values=flag_values)
    flags.DEFINE_string("data_dir", None, "Where to write cifar-10-batches-bin/, the folder "
                        "cifar10-train and cifar10-eval read with --data_dir.",
                        flag_values=flag_values)
    flags.DEFINE_float("test_fraction", 1 / 6, "Share of each class's images that goes to the "
                       "test set when image_dir holds class folders alone (no split folders).",
                       lower_bound=0, upper_bound=0.99, flag_values=flag_values)
    flags.DEFINE_integer("seed", 0, "Seed of the train/test split and of the shuffling.",
                         lower_bound=0, flag_values=flag_values)  # numpy's: not negative
    flags.DEFINE_boolean("strict", False, "Stop at the first unreadable image instead of "
                         "skipping it.", flag_values=flag_values)


def define_launch_flags(flag_values: flags.FlagValues = flags.FLAGS) -> None:
    """Flags of cifar10-launch (cifar10-train's flags follow a bare ``--``)."""
    flags.DEFINE_integer("num_workers", 2, "How many cifar10-train workers to start on this "
                         "machine, one job (worker 0 is the chief).", lower_bound=1,
                         flag_values=flag_values)
    flags.DEFINE_boolean("all_output", False, "Show every worker's lines. By default the "
                         "other workers' progress lines, the same steps and losses as the "
                         "chief's, are left out; their warnings and errors are shown.",
                         flag_values=flag_values)


# absl's words for a flag mistake, and ours.
_FLAG_VALUE = re.compile(r"^flag (--[^=\s]+)=(.*?): (.*)$", re.S)
_UNKNOWN = re.compile(r"^Unknown command line flag '([^']*)'(?:\. Did you mean: (.*?) \?)?$",
                      re.S)
_RULE = re.compile(r"^flags (\w+=[^:]*?(, \w+=[^:]*?)*): (.*)$", re.S)
_TYPE_WORDS = ((re.compile(r"^invalid literal for int\(\) with base 10: .*$", re.S),
                "expected a whole number"),
               (re.compile(r"^could not convert string to float: .*$", re.S),
                "expected a number"),
               (re.compile(r"^\S+ is not (?:a |an )?(.*)$", re.S), "must be {}"),
               (re.compile(r"^\('Non-boolean argument to boolean flag', .*\)$", re.S),
                "expected true or false"),
               (re.compile(r"^value should be one of <(.*)>$", re.S), "must be one of {}"))
_FLAGFILE = re.compile(r"^ERROR:: Unable to open flagfile: (?:\[Errno \d+\] )?([^:]*): "
                       r"'(.*)'$", re.S)
_MISSING = re.compile(r"^Missing value for flag (--\S+)$")
_BOUND_WORDS = {"positive integer": "a whole number of at least 1",
                "non-negative integer": "a whole number of at least 0",
                "non-negative number": "a number of at least 0",
                "positive number": "a number above 0"}


def flag_error_text(error: flags.Error) -> str:
    """A flag mistake as one line: ``--max_steps=abc: expected a whole number`` where
    absl says ``flag --max_steps=abc: invalid literal for int() with base 10: 'abc'``."""
    text = "; ".join(line.strip() for line in str(error).splitlines() if line.strip())
    if found := _FLAGFILE.match(text):
        return f"--flagfile={found[2]}: {found[1]}; name a file of flags, one per line"
    if found := _MISSING.match(text):
        return f"{found[1]} needs a value ({found[1]}=VALUE)"
    if found := _UNKNOWN.match(text):
        guesses = [f"--{name.strip()}" for name in (found[2] or "").split(",") if name.strip()]
        return (f"unknown flag --{found[1]}" +
                (f" (did you mean {' or '.join(guesses)}?)" if guesses else ""))
    if found := _RULE.match(text):
        return found[3]
    value = _FLAG_VALUE.match(text)
    if not value:
        return text
    name, given, problem = value.groups()
    for pattern, words in _TYPE_WORDS:
        if found := pattern.match(problem):
            if found.groups() and words.startswith("must be one of"):
                words = words.format(", ".join(found[1].split("|")))
            elif found.groups():
                words = words.format(_BOUND_WORDS.get(found[1]) or
                                     "a " + found[1].replace("integer", "whole number"))
            return f"{name}={given}: {words}"
    return f"{name}={given}: {problem}"


def pasted(name: str, path: str) -> str:
    """``--name=path`` as a line suggests it, quoted to be pasted into a shell."""
    return f"--{name}={shlex.quote(path)}"


def refuse_paths(flag_values: flags.FlagValues) -> None:
    """Refuses a path that is not UTF-8, or starts with a ~ no shell expanded."""
    for name in PATH_FLAGS:
        value = flag_values[name].value if name in flag_values else None
        if not isinstance(value, str):
            continue
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            why = ("TensorFlow reads and writes checkpoints and SavedModels by UTF-8 names"
                   if name in ("checkpoint_dir", "checkpoint", "export_dir")
                   else "the run's records, flags.txt and environment.jsonl, are UTF-8 text")
            raise flags.Error(f"--{name}={os.fsencode(value)!r} is not UTF-8: choose a name "
                              f"in UTF-8 ({why})") from None
        home = os.path.expanduser(value)
        if value.startswith("~") and home != value:
            raise flags.Error(f"--{name}={value} starts with a ~ that was not expanded (the "
                              f"shell does not expand a ~ after '='): write --{name} {value} "
                              f"or {pasted(name, home)}; for a folder named ~, write ./{value}")


def refuse_values_it_cannot_hold(flag_values: flags.FlagValues) -> None:
    """Refuses a string value that flags.txt cannot give back (absl strips each line)."""
    for flag in flag_values.get_flags_for_module(__name__):
        value = flag.value
        if not isinstance(value, str):
            continue
        if "\n" in value or "\r" in value:
            problem = "holds a line break, which would end its line"
        elif value != value.rstrip():
            problem = "ends with white space, which would be dropped"
        else:
            continue
        raise flags.Error(f"--{flag.name}={value!r} {problem} in the run's flags.txt (one "
                          f"flag per line, replayed with --flagfile): choose a value without it")


def flagfile_text(flag_values: flags.FlagValues = flags.FLAGS,
                  not_replayed: tuple[str, ...] = ("fresh_start",)) -> str:
    """The program's flags as a run's flags.txt records them: paths absolute, None
    flags left out, ``not_replayed`` booleans false (a replay never deletes), and
    ``UNSET_IS_NOT_DEFAULT`` flags not given commented out."""
    lines = []
    for flag in flag_values.get_flags_for_module(__name__):
        if flag.name in UNSET_IS_NOT_DEFAULT and not flag.present:
            lines.append(f"# {flag.serialize()}")
        elif flag.name in not_replayed:
            lines.append(f"--no{flag.name}")
        elif flag.name in PATH_FLAGS and isinstance(flag.value, str):
            lines.append(f"--{flag.name}={os.path.abspath(flag.value)}")
        elif flag.value is not None:
            lines.append(flag.serialize())
    return "".join(f"{line}\n" for line in lines)


def own_args(argv: list[str]) -> list[str]:
    """A command line's arguments for its program: those before a bare ``--`` (after it,
    another program's: cifar10-launch's trainers)."""
    return argv[1:argv.index("--")] if "--" in argv else argv[1:]


def trainers_flag_hint(error: flags.Error, argv: list[str], program: str) -> str | None:
    """The error for a flag of cifar10-train's given before the ``--``, or None."""
    if not isinstance(error, flags.UnrecognizedFlagError):
        return None
    trainer = flags.FlagValues()
    define_train_flags(trainer)
    name = error.flagname[2:] if error.flagname.startswith("no") and \
        error.flagname[2:] in trainer else error.flagname
    if name not in trainer:
        return None
    own = own_args(argv)
    at = next((i for i, arg in enumerate(own) if arg.lstrip("-").split("=")[0] == error.flagname),
              None)
    if at is None:
        return None
    width = 2 if ("=" not in own[at] and not trainer[name].boolean and at + 1 < len(own)) else 1
    given = own[at:at + width]
    after = argv[argv.index("--") + 1:] if "--" in argv else []
    return (f"{' '.join(given)} is cifar10-train's flag: put it after --, as in "
            f"{shlex.join([program, *own[:at], *own[at + width:], '--', *after, *given])}")
