"""Writes a small, learnable CIFAR-format data set (not CIFAR-10) for offline use.

    .venv/bin/python scripts/make_synthetic_data.py /tmp/fake_cifar --records_per_file=1000
    cifar10-train --data_dir=/tmp/fake_cifar --max_steps=300

It is the data of --synthetic_data: look-alike pairs of classes that the model
learns over hundreds of steps, never perfectly (about 0.7 precision after 300 steps).
With --separable it writes the easy data of tests instead (precision 1 within 100 steps).

With --tarball it writes cifar-10-binary.tar.gz instead, laid out like the real
one, and prints its MD5, for trying the download path without a network:
    cifar10-train --data_dir=/tmp/d --data_url=file:///tmp/t/cifar-10-binary.tar.gz --data_md5=<MD5>
"""

import hashlib
import os
import sys

try:
    from cifar10.data import fileformat
    from cifar10.data import synthetic
    from cifar10.cli.process import ArgumentParser
    from cifar10.core.errors import io_error
except ImportError as e:
    sys.exit(f"make_synthetic_data.py: error: {sys.executable} cannot import the cifar10 "
             f"package ({e}); run this script with the Python the package is installed in "
             f"(e.g. .venv/bin/python scripts/make_synthetic_data.py)")


def main(argv=None) -> int:
    parser = ArgumentParser(prog="make_synthetic_data.py", description=__doc__.splitlines()[0])
    parser.add_argument("data_dir", help="where to write cifar-10-batches-bin/ (or the tarball)")
    parser.add_argument("--records_per_file", type=int, default=1000,
                        help="records in each of the six .bin files (default 1000)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the generated images")
    parser.add_argument("--separable", action="store_true",
                        help="classes that never look alike (learned perfectly in a few dozen "
                             "steps) instead of the look-alike pairs of --synthetic_data")
    parser.add_argument("--tarball", action="store_true",
                        help=f"write {fileformat.TARBALL_NAME} instead of the extracted folder")
    args = parser.parse_args(argv)
    if args.records_per_file < 1:
        parser.error(f"--records_per_file must be at least 1, got {args.records_per_file}")
    try:
        print(_write(args))
    except OSError as e:  # a file or folder in the way, a denied permission, a full disk
        where = e.filename if isinstance(e.filename, str) else args.data_dir
        fix = ("a file is in the way of that folder: name a folder"
               if isinstance(e, (FileExistsError, NotADirectoryError)) else "")
        print(f"{parser.prog}: error: {io_error('cannot write', where, e, fix)}",
              file=sys.stderr)
        return 1
    return 0


def _write(args) -> str:
    """Writes the data set (or tarball) ``args`` ask for; returns the line saying so."""
    if args.tarball:
        os.makedirs(args.data_dir, exist_ok=True)
        contents = synthetic.tarball_bytes(args.records_per_file, args.seed, args.separable)
        path = os.path.join(args.data_dir, fileformat.TARBALL_NAME)
        with open(path, "wb") as f:
            f.write(contents)
        return f"wrote {path}: {len(contents)} bytes, MD5 {hashlib.md5(contents).hexdigest()}"
    path = synthetic.write_dataset(args.data_dir, args.records_per_file, args.seed,
                                   args.separable)
    kind = "separable" if args.separable else "look-alike"
    return (f"wrote {path}: 6 files of {args.records_per_file} records of {kind} classes "
            f"(synthetic, not CIFAR-10)")

if __name__ == "__main__":
    sys.exit(main())
