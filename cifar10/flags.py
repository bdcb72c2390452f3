"""The absl flags of the command-line programs (names and defaults of the original).

Only the entry points (``train_main``, ``eval_main``, ...) call these functions and
read ``FLAGS``; the library takes plain arguments.  Booleans are absl booleans,
so ``--use_fp16=false`` means False.
"""

from absl import flags

from cifar10 import cluster
from cifar10 import fileformat as ff


def define_common_flags() -> None:
    """Flags shared by cifar10-train and cifar10-eval."""
    flags.DEFINE_integer("batch_size", 128, "Number of images to process in a batch "
                         "(per replica when training).", lower_bound=1)
    flags.DEFINE_string("data_dir", "/tmp/cifar10_data",
                        "Path to the CIFAR-10 data directory; the data is downloaded and "
                        "extracted there when missing.")
    flags.DEFINE_boolean("use_fp16", False, "Train the model using fp16 (mixed precision: "
                         "float16 compute, float32 variables).")
    flags.DEFINE_string("data_url", None,
                        f"Where to download {ff.TARBALL_NAME} from when --data_dir lacks it "
                        f"(http, https or file://). Default: ${ff.DATA_URL_ENV}, else "
                        f"{ff.DATA_URL}.")
    flags.DEFINE_string("data_md5", None,
                        f"Expected MD5 of the tarball at --data_url, for a mirror of other "
                        f"data (default: the official {ff.TARBALL_MD5}, with its size).")
    flags.DEFINE_boolean("synthetic_data", False,
                         "Use generated CIFAR-format data (in <data_dir>/synthetic) instead "
                         "of the real data set: to try the toolkit offline. Not CIFAR-10.")
    flags.DEFINE_integer("synthetic_records", 1000, "Records per file of the generated data "
                         "when --synthetic_data is set.", lower_bound=1)


def define_train_flags() -> None:
    """Flags of cifar10-train."""
    define_common_flags()
    flags.DEFINE_string("train_dir", "/tmp/cifar10_train",
                        "Directory where to write event logs and checkpoints; an existing "
                        "run there is resumed.")
    flags.DEFINE_integer("max_steps", 1_000_000, "Number of batches to run.", lower_bound=1)
    flags.DEFINE_integer("num_gpus", 1, "How many GPUs (model replicas) to use; 0 trains on "
                         "the CPU. With fewer GPUs than asked, the replicas run on logical "
                         "devices.", lower_bound=0)
    flags.DEFINE_boolean("log_device_placement", False, "Whether to log device placement.")
    flags.DEFINE_integer("log_frequency", 10, "How often to log results to the console.",
                         lower_bound=1)
    flags.DEFINE_integer("checkpoint_steps", 1000, "Save a checkpoint every this many steps "
                         "(and at the last step).", lower_bound=1)
    flags.DEFINE_integer("keep_checkpoints", 5, "How many recent checkpoints to keep.",
                         lower_bound=1)
    flags.DEFINE_integer("summary_steps", 100, "Write TensorBoard summaries every this many "
                         "steps.", lower_bound=1)
    flags.DEFINE_integer("seed", 0, "Seed of the initial weights, shuffling and distortions.")
    flags.DEFINE_enum("strategy", "auto", list(cluster.STRATEGIES),
                      "How replicas are distributed: auto is multi_worker when TF_CONFIG names "
                      "several tasks, else mirrored (one replica per GPU of this machine).")
    flags.DEFINE_float("worker_timeout_secs", 300, "Multi-worker only: a worker waiting this "
                       "long for another one stops with an error instead of hanging.",
                       lower_bound=1)
    flags.DEFINE_boolean("xla", False, "Compile each replica's forward and backward pass "
                         "with XLA (can help on GPU; about 2.3x slower on CPU, see README).")
    flags.DEFINE_boolean("fresh_start", False, "Delete this trainer's own files in "
                         "--train_dir (checkpoints, state file, event files, markers; nothing "
                         "else) and start from step 0 (default: resume).")


def define_eval_flags() -> None:
    """Flags of cifar10-eval."""
    define_common_flags()
    flags.DEFINE_string("eval_dir", "/tmp/cifar10_eval", "Directory where to write event "
                        "logs and the results of each checkpoint.")
    flags.DEFINE_enum("eval_data", "test", ["test", "train_eval"],
                      "Either 'test' or 'train_eval'.")
    flags.DEFINE_string("checkpoint_dir", "/tmp/cifar10_train",
                        "Directory where to read model checkpoints.")
    flags.DEFINE_integer("eval_interval_secs", 300, "How often to run the eval.",
                         lower_bound=0)
    flags.DEFINE_integer("num_examples", 10_000, "Number of examples to run.", lower_bound=1)
    flags.DEFINE_boolean("run_once", False, "Whether to run eval only once.")
    flags.DEFINE_string("checkpoint", None, "Evaluate this checkpoint once (a path such as "
                        "runs/a/train/model.ckpt-10000) instead of the latest of "
                        "--checkpoint_dir.")
    _define_weights_flag("Evaluate")
    flags.DEFINE_float("eval_timeout", None, "Stop after this many seconds without a new "
                       "checkpoint (default: wait until training is complete).",
                       lower_bound=0)
    flags.DEFINE_boolean("eval_on_cpu", False, "Evaluate on the CPU even when a GPU is "
                         "present, so as not to compete with training for GPU memory.")


def define_predict_flags() -> None:
    """Flags of cifar10-predict (the images are its arguments)."""
    _define_checkpoint_flags("Classify with")
    flags.DEFINE_integer("top_k", 3, "How many classes to print per image, most probable "
                         "first (at most the number of classes the run was trained on).",
                         lower_bound=1, upper_bound=len(ff.CLASS_NAMES))
    flags.DEFINE_enum("output", "text", ["text", "jsonl", "csv"],
                      "text: one readable line per image; jsonl: one JSON object per line; "
                      "csv: a header row, then one row per image.")
    flags.DEFINE_integer("batch_size", 128, "Images classified at once.", lower_bound=1)


def _define_weights_flag(verb: str) -> None:
    flags.DEFINE_enum("weights", "averages", ["averages", "raw"],
                      f"{verb} the exponential moving averages of the weights (as the "
                      f"original's evaluation) or the raw trained weights.")


def define_export_flags() -> None:
    """Flags of cifar10-export."""
    _define_checkpoint_flags("Export")
    flags.DEFINE_string("export_dir", "/tmp/cifar10_export", "Where to write the SavedModel, "
                        "in a folder named after the checkpoint's step (as TensorFlow Serving "
                        "expects).")
    flags.DEFINE_boolean("tflite", False, "Also write model.tflite (float32, the "
                         "predict_images signature) into the export.")
    flags.DEFINE_boolean("overwrite", False, "Replace an earlier export of the same step.")


def _define_checkpoint_flags(verb: str) -> None:
    flags.DEFINE_string("checkpoint_dir", "/tmp/cifar10_train",
                        "Training run whose latest checkpoint is used.")
    flags.DEFINE_string("checkpoint", None, "A checkpoint to use instead of the latest of "
                        "--checkpoint_dir (a path such as runs/a/train/model.ckpt-1000).")
    _define_weights_flag(verb)


def define_prepare_flags() -> None:
    """Flags of cifar10-prepare."""
    flags.DEFINE_string("image_dir", None, "Folder with one subfolder of images per class "
                        "(or train/ and test/ folders holding those, to keep a given split).")
    flags.DEFINE_string("data_dir", None, "Where to write cifar-10-batches-bin/, the folder "
                        "cifar10-train and cifar10-eval read with --data_dir.")
    flags.DEFINE_float("test_fraction", 1 / 6, "Share of each class's images that goes to the "
                       "test set when image_dir has no train/ and test/ folders.",
                       lower_bound=0, upper_bound=0.99)
    flags.DEFINE_integer("seed", 0, "Seed of the train/test split and of the shuffling.")
    flags.DEFINE_boolean("strict", False, "Stop at the first unreadable image instead of "
                         "skipping it.")
    flags.mark_flags_as_required(["image_dir", "data_dir"])
