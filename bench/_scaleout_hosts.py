"""Worker hosts for bench/scaleout.py: each a copy of the working tree (the files git tracks
or would track) with a virtualenv of its own, kept between runs under
$TMPDIR/trustrank-scaleout: sources refreshed when the tree changes, the virtualenv rebuilt
when pyproject.toml does (pip's wheel cache makes the second and later hosts quick)."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HOSTS_DIR = Path(tempfile.gettempdir()) / "trustrank-scaleout"


def _tree_files() -> list[str]:
    out = subprocess.run(
        ["git", "ls-files", "-z", "-co", "--exclude-standard"], cwd=ROOT, check=True,
        capture_output=True,
    ).stdout
    return [p for p in out.decode().split("\0") if p and (ROOT / p).is_file()]


def _tree_stamp(files: list[str]) -> str:
    digest = hashlib.sha256()
    for name in sorted(files):
        stat = (ROOT / name).stat()
        digest.update(f"{name}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode())
    return digest.hexdigest()


def host_prepare(n: int, files: list[str], stamp: str) -> Path:
    """Host n's copy of the tree and its virtualenv; returns the virtualenv's python."""
    host = HOSTS_DIR / f"host{n}"
    src, venv = host / "src", host / "venv"
    if not (host / "src.stamp").exists() or (host / "src.stamp").read_text() != stamp:
        shutil.rmtree(src, ignore_errors=True)
        src.mkdir(parents=True)
        listing = "\0".join(files).encode()
        subprocess.run(["rsync", "-a", "--from0", "--files-from=-", f"{ROOT}/", f"{src}/"],
                       input=listing, check=True)
        (host / "src.stamp").write_text(stamp)
    deps = hashlib.sha256((ROOT / "pyproject.toml").read_bytes()).hexdigest()
    python = venv / "bin" / "python"
    if not (host / "venv.stamp").exists() or (host / "venv.stamp").read_text() != deps:
        shutil.rmtree(venv, ignore_errors=True)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        with (host / "pip.log").open("wb") as log:
            # pip's wheel cache makes the second and later hosts quick.
            subprocess.run([str(python), "-m", "pip", "install", "-q", "-e", str(src)],
                           check=True, stdout=log, stderr=subprocess.STDOUT)
        (host / "venv.stamp").write_text(deps)
    return python


def hosts_prepare(count: int) -> list[tuple[Path, Path]]:
    """(python, source folder) of each worker host, made or refreshed in parallel."""
    files = _tree_files()
    stamp = _tree_stamp(files)
    started = time.perf_counter()
    with ThreadPoolExecutor(count) as pool:
        pythons = list(pool.map(lambda n: host_prepare(n, files, stamp), range(count)))
    print(f"{count} worker hosts ready in {time.perf_counter() - started:.0f} s "
          f"under {HOSTS_DIR}", flush=True)
    return [(python, HOSTS_DIR / f"host{n}" / "src") for n, python in enumerate(pythons)]
