"""The CUDA toolkit of the CUDA variants: the lock (ci/cuda-toolkit.lock), its checks, and the
installer's failures (a wrong wheel hash with real pip; a missing or mismatched piece)."""

import subprocess
import sys

import pytest

from sam3d.core import paths
from sam3d.tools import cuda

LOCK = paths.root() / cuda.LOCK
# The smallest wheel of the lock (134 KB): the one the real-pip tests download.
SMALL = "nvidia-cuda-crt"


def _pins():
    return {p.name: p for p in cuda.read_lock(LOCK)}


def _write_lock(path, pins):
    path.write_text("".join(f"{p.name}=={p.version} \\\n    --hash=sha256:{p.hashes[0]}\n" for p in pins))
    return path


def test_the_lock_pins_every_piece_of_one_cuda_release_with_hashes():
    pins = _pins()
    assert set(pins) == set(cuda.PIECES)
    nvcc = cuda.check_lock(list(pins.values()), LOCK)
    assert nvcc.version == "13.0.88"  # the GPU machine's driver 580 supports CUDA 13.0
    for p in pins.values():
        assert len(p.hashes) == 1 and len(p.hashes[0]) == 64, p.name
    assert cuda.runtime_wheels(LOCK) == [
        f"nvidia-cuda-runtime=={pins['nvidia-cuda-runtime'].version}",
        f"nvidia-cublas=={pins['nvidia-cublas'].version}",
    ]


def test_install_folder_is_named_after_nvcc_and_the_lock_content(tmp_path):
    folder, version = cuda.install_dir(LOCK, cache=tmp_path)
    assert version == "13.0.88"
    assert folder.parent == tmp_path and folder.name.startswith("cuda-13.0.88-")
    changed = tmp_path / "changed.lock"
    changed.write_text(LOCK.read_text() + "\n# a comment\n")
    assert cuda.install_dir(changed, cache=tmp_path)[0] != folder


def test_a_lock_without_a_piece_names_it_and_the_fix(tmp_path):
    pins = [p for p in _pins().values() if p.name != "nvidia-nvvm"]
    lock = _write_lock(tmp_path / "cuda.lock", pins)
    with pytest.raises(cuda.CudaToolkitError) as e:
        cuda.check_lock(cuda.read_lock(lock), lock)
    msg = str(e.value)
    assert "nvidia-nvvm" in msg and "cicc" in msg and "add `nvidia-nvvm==VERSION --hash=sha256:...`" in msg


def test_a_piece_of_another_cuda_release_is_refused(tmp_path):
    pins = [cuda.Pin(p.name, "13.1.80", p.hashes) if p.name == "nvidia-cuda-runtime" else p for p in _pins().values()]
    lock = _write_lock(tmp_path / "cuda.lock", pins)
    with pytest.raises(cuda.CudaToolkitError) as e:
        cuda.check_lock(cuda.read_lock(lock), lock)
    assert "nvidia-cuda-runtime==13.1.80 does not match nvidia-cuda-nvcc==13.0.88 (CUDA 13.0)" in str(e.value)
    pins = [cuda.Pin(p.name, "12.9.1.4", p.hashes) if p.name == "nvidia-cublas" else p for p in _pins().values()]
    lock = _write_lock(tmp_path / "cuda.lock", pins)
    with pytest.raises(cuda.CudaToolkitError, match=r"nvidia-cublas==12\.9\.1\.4 is not for CUDA 13"):
        cuda.check_lock(cuda.read_lock(lock), lock)


@pytest.mark.parametrize(
    "line, want",
    [
        ("nvidia-cuda-crt>=13.0 --hash=sha256:" + "0" * 64, "is not pinned to one version"),
        ("nvidia-cuda-crt==13.0.88", "has no --hash=sha256"),
    ],
)
def test_unpinned_or_unhashed_entries_are_refused(tmp_path, line, want):
    lock = tmp_path / "cuda.lock"
    lock.write_text(line + "\n")
    with pytest.raises(cuda.CudaToolkitError, match=want):
        cuda.read_lock(lock)


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    """Skips when pip cannot download the small wheel here (no package index)."""
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--only-binary=:all:",
            "-q",
            "-d",
            str(tmp_path_factory.mktemp("probe")),
            f"{SMALL}=={_pins()[SMALL].version}",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    if r.returncode != 0:
        pytest.skip(f"pip cannot download {SMALL} here (no package index): {r.stderr.strip()[-200:]}")


def test_a_wrong_wheel_hash_stops_the_install_showing_both_hashes(tmp_path, index):
    """Real pip, one real wheel of the lock with a wrong hash: nothing is installed and the
    error shows the lock's hash and the downloaded wheel's."""
    good = _pins()[SMALL]
    bad = "0" * 64
    lock = _write_lock(tmp_path / "cuda.lock", [cuda.Pin(good.name, good.version, (bad,))])
    target = tmp_path / "target"
    with pytest.raises(cuda.CudaToolkitError) as e:
        cuda.pip_install(lock, target)
    msg = str(e.value)
    assert bad in msg and good.hashes[0] in msg, msg
    assert SMALL in msg
    assert not (target / "nvidia").exists()


def test_the_right_hash_installs_the_wheel_with_real_pip(tmp_path, index):
    lock = _write_lock(tmp_path / "cuda.lock", [_pins()[SMALL]])
    cuda.pip_install(lock, tmp_path / "target")
    assert (tmp_path / "target" / "nvidia" / "cu13" / "include" / "crt" / "host_config.h").is_file()


def _fake_install(folder, pins, version):
    """A folder laid out as the wheels install: dist-info per pin, every piece's file."""
    major = version.split(".")[0]
    for p in pins:
        (folder / f"{p.name.replace('-', '_')}-{p.version}.dist-info").mkdir(parents=True)
    root = folder / "nvidia" / f"cu{major}"
    for _, files in cuda.PIECES.values():
        for f in files:
            (root / f.format(major=major)).parent.mkdir(parents=True, exist_ok=True)
            (root / f.format(major=major)).write_text("")
    return root


def test_verify_accepts_a_complete_install_and_adds_the_unversioned_links(tmp_path):
    pins = list(_pins().values())
    root = _fake_install(tmp_path, pins, "13.0.88")
    cuda._add_links(root, "13")
    assert cuda.verify(tmp_path, pins, "13.0.88") == root
    assert (root / "lib" / "libcudart.so").resolve() == (root / "lib" / "libcudart.so.13").resolve()
    assert (root / "lib64").resolve() == (root / "lib").resolve()
    for name in cuda.LINKS:
        assert (root / "lib" / name).is_symlink()


def test_a_missing_file_names_it_its_wheel_and_the_fix(tmp_path):
    pins = list(_pins().values())
    root = _fake_install(tmp_path, pins, "13.0.88")
    (root / "nvvm" / "bin" / "cicc").unlink()
    with pytest.raises(cuda.CudaToolkitError) as e:
        cuda.verify(tmp_path, pins, "13.0.88")
    msg = str(e.value)
    assert "lacks nvvm/bin/cicc" in msg and "nvidia-nvvm" in msg and f"remove {tmp_path}" in msg


def test_an_installed_wheel_of_another_version_is_named(tmp_path):
    pins = list(_pins().values())
    _fake_install(tmp_path, pins, "13.0.88")
    (tmp_path / "nvidia_cublas-13.0.2.14.dist-info").rename(tmp_path / "nvidia_cublas-13.1.0.3.dist-info")
    with pytest.raises(cuda.CudaToolkitError, match="has nvidia-cublas 13.1.0.3, ci/cuda-toolkit.lock pins 13.0.2.14"):
        cuda.verify(tmp_path, pins, "13.0.88")


@pytest.mark.parametrize("rel", ["lib64", "lib/libcudart.so", "lib/libcublasLt.so"])
def test_a_missing_link_is_named_with_the_fix(tmp_path, rel):
    pins = list(_pins().values())
    root = _fake_install(tmp_path, pins, "13.0.88")
    cuda._add_links(root, "13")
    (root / rel).unlink()
    with pytest.raises(cuda.CudaToolkitError, match=rf"lacks {rel} \(a link its install adds\): remove {tmp_path}"):
        cuda.verify(tmp_path, pins, "13.0.88")
