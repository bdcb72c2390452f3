"""``--help``: each program's usage, one sentence, and its flags by topic, the common
ones first, each in one or two lines (absl's full list stays in ``--helpfull``).
No TensorFlow here."""

from __future__ import annotations

import re
import textwrap

from absl import flags

from cifar10.cli.flags import PATH_FLAGS

# Each program's arguments, docs page, and flags by topic, the common ones first.
HELP_TOPICS = {
    "cifar10-train": ("[flags]", "docs/training.md", (
        ("Data", "data_dir synthetic_data dataset label synthetic_records data_url data_md5"),
        ("Training", "train_dir max_steps max_epochs batch_size fresh_start seed deterministic "
                     "eval_every_steps"),
        ("Hyperparameters", "learning_rate learning_rate_decay_factor num_epochs_per_decay "
                            "moving_average_decay weight_decay"),
        ("Precision and speed", "use_bf16 use_fp16 xla allow_tf32 kernels steps_per_loop "
                                "profile_steps"),
        ("Several GPUs and machines", "num_gpus replicas_per_gpu all_reduce strategy "
                                      "worker_timeout_secs slurm_port_base step_timeout_secs"),
        ("Output and logging", "log_frequency summary_steps checkpoint_steps keep_checkpoints "
                               "log_device_placement"))),
    "cifar10-eval": ("[flags]", "docs/evaluation.md", (
        ("Run and results", "checkpoint_dir eval_dir run_once checkpoint model weights "
                            "misclassified_images"),
        ("Waiting for checkpoints", "eval_interval_secs eval_timeout wait_for_run"),
        ("Data", "data_dir eval_data num_examples synthetic_data dataset label "
                 "synthetic_records data_url data_md5"),
        ("Precision and speed", "batch_size eval_on_cpu use_bf16 use_fp16 allow_tf32"))),
    "cifar10-predict": ("[flags] IMAGE_OR_FOLDER ...", "docs/using-a-trained-model.md", (
        ("Flags", "checkpoint_dir top_k output checkpoint weights batch_size"),)),
    "cifar10-export": ("[flags]", "docs/using-a-trained-model.md", (
        ("Flags", "checkpoint_dir export_dir tflite overwrite checkpoint weights"),
        ("Calibration data (--tflite=int8)", "calibration_images data_dir synthetic_data "
                                             "dataset label synthetic_records data_url data_md5"),
    )),
    "cifar10-prepare": ("--image_dir=PATH --data_dir=PATH [flags]", "docs/own-images.md", (
        ("Flags", "image_dir data_dir test_fraction seed strict"),)),
    "cifar10-launch": ("[flags] -- [cifar10-train's flags]", "docs/multi-machine.md", (
        ("Flags", "num_workers all_output"),)),
}
HELP_WIDTH = 90


def short_help(program: str, doc: str, flag_values: flags.FlagValues) -> str:
    """--help: the usage, the doc's first line, the flags by ``HELP_TOPICS`` (each its
    help's gist in one or two lines), and where to read more."""
    arguments, page, topics = HELP_TOPICS[program]
    summary = doc.strip().splitlines()[0].split(": ", 1)[-1]
    lines = [f"Usage: {program} {arguments}", summary[:1].upper() + summary[1:]]
    for topic, names in topics:
        lines += ["", f"{topic}:"]
        for name in names.split():
            lines += _help_lines(flag_values[name])
    return "\n".join(lines + [
        "", "TensorFlow's own log lines are hidden: -v 0 shows them. --version: the versions.",
        f"Every flag in full, absl's own too: --helpfull. Guide: {page}"])


def _help_lines(flag: flags.Flag) -> list[str]:
    """``--name=DEFAULT  help`` in one or two lines: the help's first sentence, else that
    without its remarks in brackets, else that cut at its last ': ' or '; ' that fits."""
    if flag.boolean:
        shown = str(bool(flag.default)).lower()
    elif flag.default is None:  # a placeholder
        shown = "PATH" if flag.name in PATH_FLAGS else flag.parser.flag_type().upper()
    else:
        shown = f"{flag.default:g}" if isinstance(flag.default, float) else flag.default
    sentence = re.split(r"(?<=[\w)]\.)\s+(?=[A-Z])", flag.help)[0]
    plain = sentence
    while (shorter := re.sub(r" ?\([^()]*\)", "", plain)) != plain:  # inner ones first
        plain = shorter
    cut = [plain[:end.start()] + " ..." for end in reversed(list(re.finditer(r"[:;] ", plain)))]
    for text in [sentence, plain, *cut]:
        lines = textwrap.wrap(f"  --{flag.name}={shown}  {text}", HELP_WIDTH,
                              subsequent_indent=" " * 6, break_on_hyphens=False,
                              break_long_words=False)
        if len(lines) <= 2:
            break
    return lines
