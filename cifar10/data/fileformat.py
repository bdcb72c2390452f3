"""The CIFAR-10 and CIFAR-100 binary distributions: file names and record layout (a
label byte, then the 32x32 image's red, green and blue planes, row-major)."""

import dataclasses

IMAGE_SIZE = 32  # height and width of a stored image
NUM_CHANNELS = 3
NUM_CLASSES = 10
MAX_CLASSES = 256  # a record's label is one byte
LABEL_BYTES = 1
IMAGE_BYTES = IMAGE_SIZE * IMAGE_SIZE * NUM_CHANNELS  # 3,072
RECORD_BYTES = LABEL_BYTES + IMAGE_BYTES  # 3,073

RECORDS_PER_REAL_FILE = 10_000
NUM_EXAMPLES_PER_EPOCH_FOR_TRAIN = 50_000

BATCHES_DIRNAME = "cifar-10-batches-bin"
TRAIN_FILES = tuple(f"data_batch_{i}.bin" for i in range(1, 6))
TEST_FILES = ("test_batch.bin",)
META_FILE = "batches.meta.txt"

CLASS_NAMES = (
    "airplane", "automobile", "bird", "cat", "deer",
    "dog", "frog", "horse", "ship", "truck",
)

DATA_URL = "https://www.cs.toronto.edu/~kriz/cifar-10-binary.tar.gz"
TARBALL_NAME = "cifar-10-binary.tar.gz"
TARBALL_BYTES = 170_052_171
TARBALL_MD5 = "c32a1d4ab5d03f1284b67883e8d87530"

DATA_URL_ENV = "CIFAR10_DATA_URL"  # overrides DATA_URL; --data_url overrides both


@dataclasses.dataclass(frozen=True)
class Archive:
    """A data set's binary tarball, as its authors publish it."""

    name: str  # the --dataset value
    title: str  # its name in prose
    url: str
    tarball: str
    md5: str
    size: int | None  # bytes; None where not published
    folder: str  # what the tarball extracts to
    url_env: str | None  # environment variable that overrides ``url``, if any


CIFAR10 = Archive("cifar10", "CIFAR-10", DATA_URL, TARBALL_NAME, TARBALL_MD5, TARBALL_BYTES, BATCHES_DIRNAME,
                  DATA_URL_ENV)
# CIFAR-100's records: a coarse label byte (20 classes), a fine one (100), the image.
CIFAR100 = Archive("cifar100", "CIFAR-100", "https://www.cs.toronto.edu/~kriz/cifar-100-binary.tar.gz",
                   "cifar-100-binary.tar.gz", "03b5dce01913d631647c71ecec9e9cb8", None,
                   "cifar-100-binary", None)
ARCHIVES = {archive.name: archive for archive in (CIFAR10, CIFAR100)}
CIFAR100_FILES = {"train": "train.bin", "test": "test.bin"}
CIFAR100_LABEL_BYTES = 2
CIFAR100_LABELS = {"coarse": 0, "fine": 1}  # the label's byte in a record
CIFAR100_NAMES_FILES = {"coarse": "coarse_label_names.txt", "fine": "fine_label_names.txt"}
# The CIFAR-10-format folder written from the extracted data, per label.
CIFAR100_BATCHES_DIRS = {label: f"cifar-100-{label}-batches-bin" for label in CIFAR100_LABELS}

SPLIT_FILES = {"train": TRAIN_FILES, "train_eval": TRAIN_FILES, "test": TEST_FILES}  # read

# Files that make a folder a data folder: the programs write no output among them.
DATA_FILES = (*TRAIN_FILES, *TEST_FILES, META_FILE, *CIFAR100_FILES.values())
