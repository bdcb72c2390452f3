"""Every setting in one place: the fixed hyperparameters, and ``TrainConfig`` and
``EvalConfig``, whose fields carry their flag's help and bounds (``setting``).  No
TensorFlow, so that ``--help`` answers at once."""

from __future__ import annotations

import dataclasses
from typing import Any, Sequence

# -- the tutorial's hyperparameters (TrainConfig's defaults) and fixed ones ---

INITIAL_LEARNING_RATE = 0.1
LEARNING_RATE_DECAY_FACTOR = 0.1
NUM_EPOCHS_PER_DECAY = 350  # epochs of examples between two decays
MOVING_AVERAGE_DECAY = 0.9999  # of the weight averages the evaluator uses
WEIGHT_DECAY = 0.004  # of local3's and local4's weights (L2)
LOSS_AVERAGE_DECAY = 0.9  # of the smoothed losses in TensorBoard
MIN_SHUFFLE_BUFFER = 20_000  # 0.4 x 50,000, the original's min_after_dequeue
# --use_fp16's dynamic loss scale: its start, and the finite steps in a row that double it.
INITIAL_LOSS_SCALE = 2.0 ** 15
LOSS_SCALE_GROWTH_STEPS = 2000

STEPS_PER_LOOP = 100  # --steps_per_loop's default (docs/performance.md)

CROP_SIZE = 24  # the tutorial trains and evaluates on 24x24 crops
MAX_BRIGHTNESS_DELTA = 63.0
CONTRAST_RANGE = (0.2, 1.8)

# Local response normalisation after conv1's pooling and before conv2's.
LRN_DEPTH_RADIUS = 4
LRN_BIAS = 1.0
LRN_ALPHA = 0.001 / 9.0
LRN_BETA = 0.75

# -- choices -----------------------------------------------------------------

PRECISION_CONFLICT = "use_fp16 and use_bf16 exclude each other: set at most one of them"
# TensorFlow has no deterministic XLA max-pooling gradient: the first step would fail.
DETERMINISTIC_XLA_CONFLICT = ("--deterministic and --xla exclude each other: XLA has no "
                              "deterministic max-pooling gradient; drop one")
WEIGHTS = ("averages", "raw")  # which weights of a checkpoint to use
EVAL_DATA = ("test", "train_eval")
# TensorBoard tags of a score, cifar10-eval's and --eval_every_steps' (the HParams metrics).
PRECISION_TAG = "Precision @ 1"
LOSS_TAG = "Test loss"  # the mean cross entropy over the examples scored
KERNEL_CHOICES = ("auto", "compiled", "tensorflow")  # cifar10.kernels.layers.choose
ALL_REDUCE = ("auto", "nccl", "hierarchical_copy", "one_device")  # distribute.gpus.all_reduce


def setting(default: Any = dataclasses.MISSING, help: str = "", *,  # noqa: A002
            flag_default: Any = dataclasses.MISSING, lower_bound: float | None = None,
            upper_bound: float | None = None, above: float | None = None,
            choices: Sequence[str] | None = None,
            flag: bool = True, shared: bool = False, trained: str = "") -> Any:
    """A config field and its flag (unless not ``flag``), ``flag_default`` where the
    library has none; ``above``: a bound the value must exceed.  ``shared``: every worker
    is given it alike; ``trained`` (shared too): the words that name it where a resumed
    run changes it."""
    metadata = {"help": help, "flag": flag, "lower_bound": lower_bound,
                "upper_bound": upper_bound, "above": above, "choices": choices,
                "shared": shared or bool(trained), "trained": trained,
                "flag_default": default if flag_default is dataclasses.MISSING else flag_default}
    return dataclasses.field(default=default, metadata=metadata)


@dataclasses.dataclass
class TrainConfig:
    """The settings of a training run; the defaults are the original's."""

    train_dir: str = setting(
        help="Directory where to write event logs and checkpoints; an existing run there "
             "is resumed.", flag_default="/tmp/cifar10_train")
    batch_size: int = setting(128, "Number of images to process in a batch, per replica.",
                              lower_bound=1, trained="the batch size per replica")
    max_steps: int = setting(1_000_000, "Number of batches to run.", lower_bound=1,
                             shared=True)
    log_frequency: int = setting(10, "How often to log results to the console.", lower_bound=1,
                                 shared=True)
    steps_per_loop: int = setting(
        STEPS_PER_LOOP, "Run up to this many steps in one call into TensorFlow; the host "
        "reads the steps' losses only where a loop ends (log lines come then), which is "
        "also at every summary, checkpoint, profile window edge and --max_steps, so these "
        "do not depend on it. 1: one call per step.", lower_bound=1, shared=True)
    step_timeout_secs: float = setting(
        300, "End a run whose steps hang (on GPUs most often in NCCL's all-reduce) with an "
             "error, the last checkpoint kept. A call of k steps may take this many seconds "
             "plus k times 10 times the slowest step after the first (which may take 1 ms "
             "more per batch a --deterministic resume replays).",
        lower_bound=1)
    checkpoint_steps: int = setting(1000, "Save a checkpoint every this many steps (and at "
                                          "the last step).", lower_bound=1, shared=True)
    keep_checkpoints: int = setting(5, "How many recent checkpoints to keep.", lower_bound=1)
    summary_steps: int = setting(100, "Write TensorBoard summaries every this many steps.",
                                 lower_bound=1, shared=True)
    seed: int = setting(0, "Seed of the initial weights, shuffling and distortions.",
                        lower_bound=0, upper_bound=2**63 - 1,  # TensorFlow's int64 seeds
                        trained="the seed")
    use_fp16: bool = setting(False, "Train the model using fp16 (mixed precision: float16 "
                                    "compute, float32 variables, dynamic loss scaling).",
                             shared=True)  # recorded as the precision
    use_bf16: bool = setting(False, "Train with bfloat16 convolutions and matmuls (float32 "
                                    "variables, averages, pooling, LRN, loss and updates; "
                                    "no loss scaling). Fast on CPUs with AVX512_BF16 or AMX "
                                    "and on GPUs from Ampere on; emulated, and slower than "
                                    "float32, elsewhere.",
                             shared=True)
    deterministic: bool = setting(
        False, "Make the run reproducible: TensorFlow's op determinism and a data order and "
               "distortions fixed by --seed, also across a stop and resume, so that two runs "
               "with the same flags on the same machine and TensorFlow write identical "
               "checkpoints (see docs/training.md; slower on GPUs).",
        trained="deterministic mode")
    # The tutorial's hyperparameters (its cifar10.py constants), its values the defaults.
    learning_rate: float = setting(INITIAL_LEARNING_RATE, "Initial learning rate.",
                                   lower_bound=0, trained="the initial learning rate")
    learning_rate_decay_factor: float = setting(
        LEARNING_RATE_DECAY_FACTOR, "Learning rate decay factor.", lower_bound=0,
        upper_bound=1, trained="the learning rate decay factor")
    num_epochs_per_decay: float = setting(
        NUM_EPOCHS_PER_DECAY, "Epochs after which the learning rate decays.",
        above=0, trained="the epochs per decay")
    moving_average_decay: float = setting(
        MOVING_AVERAGE_DECAY, "The decay to use for the moving average of the weights.",
        lower_bound=0, upper_bound=1, trained="the moving average decay")
    weight_decay: float = setting(
        WEIGHT_DECAY, "L2 weight decay of the two fully connected layers, local3 and local4.",
        lower_bound=0, trained="the weight decay")
    max_epochs: float | None = setting(
        None, "Stop after this many epochs of examples, or at --max_steps if that comes "
              "first.", above=0, shared=True)
    eval_every_steps: int = setting(
        0, "Score the test split with the moving-average weights every this many steps "
           "(as cifar10-eval does) and at the last step, keep the best checkpoint in "
           "<train_dir>/best; 0: never.",
        lower_bound=0, shared=True)
    loss_scale_growth_steps: int = setting(LOSS_SCALE_GROWTH_STEPS, flag=False, shared=True)
    shuffle_buffer: int = setting(MIN_SHUFFLE_BUFFER, flag=False)
    kernels: str = setting(
        "auto", "How training computes LRN, conv1's bias and ReLU with pool1, and "
                "conv2's with norm2: "
                "'compiled', C++ kernels built for this CPU on first use (faster; CPU "
                "replicas without --xla); 'tensorflow', TensorFlow's ops; 'auto', the "
                "kernels where they can run and be built, else the ops. Both compute the "
                "same function (docs/performance.md).",
        choices=KERNEL_CHOICES)
    xla: bool = setting(False, "Compile each replica's forward and backward pass with XLA "
                               "(can help on GPU; about 2.3x slower on CPU, see docs/performance.md).",
                        trained="XLA compilation")
    # (first, last): the steps --profile_steps traces (its flag is cli.flags').
    profile_steps: tuple[int, int] | None = setting(None, flag=False, shared=True)
    # How the replicas run (distribute.devices.make_strategy): alike on every worker.
    replicas_per_gpu: int = setting(
        1, "Replicas on logical slices of each GPU (2048 MB each, checked against the card's "
           "memory): --num_gpus=4 --replicas_per_gpu=2 trains 4 replicas on 2 GPUs.",
        lower_bound=1, shared=True)
    all_reduce: str = setting(
        "auto", "How the replicas add up their gradients: auto is NCCL between whole GPUs, "
                "else one device (on the CPU, on slices of a GPU, between the workers of one "
                "machine). Where NCCL hangs: one_device (on several machines, ring). "
                "hierarchical_copy needs an even number of replicas.",
        choices=ALL_REDUCE, shared=True)
    fresh_start: bool = setting(False, "Delete this trainer's own files in --train_dir "
                                       "(checkpoints, state file, event files, markers, run "
                                       "records; nothing else) and start from step 0 "
                                       "(default: resume).")

    def check(self) -> None:
        """Raises ValueError naming the first setting out of its flag's range."""
        compute_dtype(self)
        if self.deterministic and self.xla:
            raise ValueError(DETERMINISTIC_XLA_CONFLICT)
        for field in flag_fields(TrainConfig):
            value, meta = getattr(self, field.name), field.metadata
            low, high, above = meta["lower_bound"], meta["upper_bound"], meta["above"]
            if value is None:  # an optional setting left out
                continue
            if low is not None and value < low:
                raise ValueError(f"{field.name} must be at least {low}, got {value}")
            if above is not None and value <= above:
                raise ValueError(f"{field.name} must be above {above}, got {value}")
            if high is not None and value > high:
                raise ValueError(f"{field.name} must be at most {high}, got {value}")
        if self.profile_steps is not None:
            check_profile_steps(self.profile_steps, self.max_steps)


def parse_profile_steps(text: str) -> tuple[int, int] | None:
    """``--profile_steps``' "FIRST,LAST" (or "N") as (first, last); None for "none" or ""."""
    if text.strip().lower() in ("none", ""):  # the default: turns a replayed window off
        return None
    parts = [part.strip() for part in text.split(",")]
    try:
        if len(parts) > 2:
            raise ValueError
        first, last = int(parts[0]), int(parts[-1])
    except ValueError:
        raise ValueError(f"expected FIRST,LAST: two step numbers such as 11,20 (or none, "
                         f"no trace), got {text!r}") from None
    check_profile_steps((first, last))
    return first, last


def check_profile_steps(window: tuple[int, int], max_steps: int | None = None) -> None:
    """Raises ValueError unless ``window`` is (first, last), 1 <= first <= last <= max_steps."""
    first, last = window
    if first < 1:
        raise ValueError(f"the first step to profile must be at least 1, got {first} "
                         f"(steps count from 1, as the log lines)")
    if last < first:
        raise ValueError(f"the last step to profile, {last}, comes before the first, "
                         f"{first}: give FIRST,LAST with FIRST <= LAST")
    if max_steps is not None and last > max_steps:
        raise ValueError(f"the last step to profile, {last}, is beyond max_steps={max_steps}: "
                         f"profile earlier steps, raise --max_steps, or pass --profile_steps=none "
                         f"for no trace")


@dataclasses.dataclass
class EvalConfig:
    """The settings of an evaluation run; the defaults are the original's."""

    checkpoint_dir: str = setting(help="Directory where to read model checkpoints.",
                                  flag_default="/tmp/cifar10_train")
    eval_dir: str = setting(help="Directory where to write event logs and the results of "
                                 "each checkpoint.", flag_default="/tmp/cifar10_eval")
    eval_files: Sequence[str] = setting((), flag=False)  # the .bin files of eval_data
    # The data's classes in label order: a checkpoint trained on others is refused.
    class_names: Sequence[str] = setting((), flag=False)
    eval_data: str = setting("test", "Either 'test' or 'train_eval'.", choices=EVAL_DATA)
    num_examples: int = setting(10_000, "Number of examples to run.", lower_bound=1)
    batch_size: int = setting(128, "Number of images to process in a batch.", lower_bound=1)
    weights: str = setting("averages", "Evaluate the exponential moving averages of the "
                                       "weights (as the original's evaluation) or the raw "
                                       "trained weights.", choices=WEIGHTS)
    misclassified_images: int = setting(
        16, "How many misclassified test images to show per evaluation (each class's "
            "first wrong ones in file order, an equal share per class, so mostly the same "
            "from one checkpoint to the next), in TensorBoard "
            "and in a PNG file in --eval_dir; 0 for none.", lower_bound=0)
    eval_interval_secs: float = setting(300, "How often to run the eval.", lower_bound=0)
    eval_timeout: float | None = setting(None, "Stop after this many seconds without a new "
                                               "checkpoint (default: wait until training is "
                                               "complete).", lower_bound=0)
    run_once: bool = setting(False, "Whether to run eval only once.")
    use_fp16: bool = setting(False, "Evaluate in fp16 (float16 compute).")
    use_bf16: bool = setting(False, "Evaluate in bfloat16 compute (checkpoints of either "
                                    "mode evaluate in either).")
    checkpoint: str | None = setting(None, "Evaluate this checkpoint once (a path such as "
                                           "runs/a/train/model.ckpt-10000, or its .index "
                                           "file) instead of the newest of "
                                           "--checkpoint_dir.")
    model: str | None = setting(None, "Score this exported model once instead of a "
                                      "checkpoint: a version folder of cifar10-export "
                                      "(<export_dir>/<step>) or a .tflite file in it "
                                      "(run with LiteRT).")


def compute_dtype(settings: TrainConfig | EvalConfig) -> str:
    """The model's compute type, 'float16', 'bfloat16' or 'float32'; ValueError for both."""
    if settings.use_fp16 and settings.use_bf16:
        raise ValueError(PRECISION_CONFLICT)
    return "float16" if settings.use_fp16 else "bfloat16" if settings.use_bf16 else "float32"


def flag_fields(config_class: type) -> list[dataclasses.Field]:
    """The fields of ``config_class`` that are command-line flags, in order."""
    return [f for f in dataclasses.fields(config_class) if f.metadata.get("flag")]


def flag_default(config_class: type, name: str) -> Any:
    """The default of the flag made from the field ``name`` of ``config_class``."""
    return next(f.metadata["flag_default"] for f in flag_fields(config_class) if f.name == name)


def marked(key: str) -> dict[str, Any]:
    """{field: its mark} of TrainConfig's fields marked ``key`` ('shared', 'trained')."""
    return {f.name: f.metadata[key] for f in dataclasses.fields(TrainConfig) if f.metadata[key]}
