"""Generate trustrank/risk/data/java_packages.json.gz: Java package prefix -> Maven artifacts.

The index is read from real artifacts, never typed by hand:

- `--maven-repo DIR` (repeatable): a Maven repository layout (`g/r/o/u/p/artifact/version/
  artifact-version.jar`), such as Debian's /usr/share/maven-repo or ~/.m2/repository. The
  groupId, artifactId and version come from the path; the packages from the jar's classes.
- `--git-tree GITDIR REF SUBDIR GROUPID` (repeatable): a multi-module source tree in a git
  repository (a bare mirror will do) whose module directories are named by their artifactId
  (Spring Boot's `spring-boot-project/<artifactId>/src/main/java/...`); the packages come
  from the `.java` paths under `src/main/java`.

For each artifact the packages it holds are folded into the shortest prefixes that name it
alone among every artifact read (longest-prefix lookups then find it), but never shorter than
one segment past what the package shares with the groupId, nor shorter than three segments
(`org.h2` could be any `org.h2*` artifact not read here): `org.springframework.boot.
autoconfigure` names spring-boot-autoconfigure, `org.h2.jdbc` names com.h2database:h2. A
package several artifacts hold (a split package) keeps all of them. Aggregate jars
(`*-all`) and jars whose every package another artifact holds are left out.

Usage (what made the committed file; see trustrank/risk/data/README.md):

    python scripts/gen_package_index.py --maven-repo /usr/share/maven-repo \\
        --git-tree /path/to/spring-boot.git v3.5.16 spring-boot-project org.springframework.boot \\
        --out trustrank/risk/data/java_packages.json.gz
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import subprocess
import sys
import zipfile
from collections import defaultdict
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

FORMAT = "trustrank-java-packages/1"
MIN_DEPTH = 3
MAX_DEPTH = 7
_AGGREGATE_SUFFIXES = ("-all", "-bundle", "-uber")
_SKIP_ARTIFACT_SUFFIXES = ("-tests", "-test", "-sources", "-javadoc", "-docs")

Artifact = tuple[str, str, str]  # groupId, artifactId, version


def packages_of_jar(path: Path) -> set[str]:
    """The Java packages whose classes a jar holds (multi-release and module-info aside)."""
    out: set[str] = set()
    with zipfile.ZipFile(path) as jar:
        for name in jar.namelist():
            if not name.endswith(".class") or name.startswith("META-INF/"):
                continue
            package = name.rpartition("/")[0].replace("/", ".")
            if package:
                out.add(package)
    return out


def read_maven_repo(root: Path) -> dict[Artifact, set[str]]:
    """Artifacts of a Maven repository layout; Debian's `debian` version aliases and the
    symlinks it keeps for them are read once, under their real version."""
    found: dict[tuple[str, str], tuple[str, set[str]]] = {}
    seen: set[str] = set()
    for dirpath, _dirs, files in os.walk(root):
        for file in sorted(files):
            if not file.endswith(".jar"):
                continue
            path = Path(dirpath) / file
            rel = path.relative_to(root).parts
            if len(rel) < 4:
                continue
            *group, artifact, version, _ = rel
            if version == "debian" or artifact.endswith(_SKIP_ARTIFACT_SUFFIXES):
                continue
            if file != f"{artifact}-{version}.jar":
                continue  # a classifier jar (sources, tests, natives)
            real = os.path.realpath(path)
            if real in seen:
                continue
            seen.add(real)
            try:
                packages = packages_of_jar(path)
            except (zipfile.BadZipFile, OSError):
                continue
            if packages:
                key = (".".join(group), artifact)
                old = found.get(key)
                if old is None or version > old[0]:
                    found[key] = (version, packages)
    return {(g, a, v): p for (g, a), (v, p) in found.items()}


def read_git_tree(gitdir: str, ref: str, subdir: str, group: str) -> tuple[
        str, dict[Artifact, set[str]]]:
    """Modules of a source tree in git: `<subdir>/<artifactId>/src/main/java/<package>/X.java`.
    Returns the commit read and the artifacts."""
    # The generator's own input: a git directory the operator names on the command line.
    commit = subprocess.run(  # noqa: S603
        ["git", "--git-dir", gitdir, "rev-parse", f"{ref}^{{commit}}"],  # noqa: S607
        capture_output=True, text=True, check=True,
    ).stdout.strip()
    listing = subprocess.run(  # noqa: S603
        ["git", "--git-dir", gitdir, "ls-tree", "-r", "--name-only", commit,  # noqa: S607
         subdir + "/"],
        capture_output=True, text=True, check=True,
    ).stdout.splitlines()
    packages: dict[str, set[str]] = defaultdict(set)
    marker = "/src/main/java/"
    for path in listing:
        if not path.endswith(".java") or marker not in path:
            continue
        module_path, _, source = path.partition(marker)
        artifact = module_path.rsplit("/", 1)[-1]
        package = source.rpartition("/")[0].replace("/", ".")
        if package and not artifact.endswith(_SKIP_ARTIFACT_SUFFIXES):
            packages[artifact].add(package)
    version = ref.removeprefix("v")
    return commit, {(group, a, version): p for a, p in packages.items()}


def _common_depth(package: str, group: str) -> int:
    n = 0
    for a, b in zip(package.split("."), group.split("."), strict=False):
        if a != b:
            break
        n += 1
    return n


def _drop_aggregates(artifacts: Mapping[Artifact, set[str]]) -> dict[Artifact, set[str]]:
    holders: dict[str, int] = defaultdict(int)
    for packages in artifacts.values():
        for p in packages:
            holders[p] += 1
    out = {}
    for art, packages in artifacts.items():
        if art[1].endswith(_AGGREGATE_SUFFIXES):
            continue
        if len(artifacts) > 1 and all(holders[p] > 1 for p in packages):
            continue  # a repackaging of others' classes
        out[art] = packages
    return out


def build_index(artifacts: Mapping[Artifact, set[str]]) -> dict[str, list[str]]:
    """Package prefix -> sorted `groupId:artifactId` list (see the module docstring)."""
    artifacts = _drop_aggregates(artifacts)
    owners: dict[str, set[str]] = defaultdict(set)  # package -> coordinates
    for (group, artifact, _v), packages in artifacts.items():
        for p in packages:
            owners[p].add(f"{group}:{artifact}")
    # Every prefix of every package -> the artifacts holding something under it.
    under: dict[str, set[str]] = defaultdict(set)
    for p, coords in owners.items():
        parts = p.split(".")
        for n in range(1, len(parts) + 1):
            under[".".join(parts[:n])].update(coords)
    index: dict[str, set[str]] = {}
    for (group, artifact, _v), packages in artifacts.items():
        coord = f"{group}:{artifact}"
        for p in packages:
            parts = p.split(".")
            floor = min(len(parts), max(MIN_DEPTH, _common_depth(p, group) + 1))
            for n in range(floor, len(parts) + 1):
                prefix = ".".join(parts[:n])
                if under[prefix] == {coord}:
                    index.setdefault(prefix, set()).add(coord)
                    break
                if n >= MAX_DEPTH or n == len(parts):
                    # Shared to the end (or too deep to fold): the package names all holders.
                    index.setdefault(".".join(parts[:n]), set()).update(owners.get(
                        ".".join(parts[:n]), under[prefix]))
                    break
    # Longest-prefix lookups make an entry redundant under an ancestor entry saying the same.
    out: dict[str, list[str]] = {}
    for prefix in sorted(index):
        parts = prefix.split(".")
        ancestor = next((".".join(parts[:n]) for n in range(len(parts) - 1, 0, -1)
                         if ".".join(parts[:n]) in index), None)
        if ancestor is not None and index[ancestor] == index[prefix]:
            continue
        out[prefix] = sorted(index[prefix])
    return out


def render(doc: Mapping[str, Any]) -> bytes:
    """The committed bytes: canonical JSON (sorted keys, one entry per line), gzip'd with no
    timestamp so the same index gives the same file."""
    text = json.dumps(doc, sort_keys=True, indent=0, ensure_ascii=True) + "\n"
    return gzip.compress(text.encode(), compresslevel=9, mtime=0)


def document(*, packages: Mapping[str, list[str]], sources: Iterable[Mapping[str, Any]]) -> dict[
        str, Any]:
    return {"format": FORMAT, "sources": list(sources), "packages": dict(packages)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--maven-repo", action="append", default=[], type=Path)
    ap.add_argument("--git-tree", action="append", default=[], nargs=4,
                    metavar=("GITDIR", "REF", "SUBDIR", "GROUPID"))
    ap.add_argument("--repository-name", action="append", default=[],
                    help="public name of each --git-tree, in order (for the provenance)")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    artifacts: dict[Artifact, set[str]] = {}
    sources: list[dict[str, Any]] = []
    for root in args.maven_repo:
        read = read_maven_repo(root)
        artifacts.update(read)
        sources.append({"kind": "maven-repo", "path": str(root),
                        "artifacts": sorted(f"{g}:{a}:{v}" for g, a, v in read)})
    for i, (gitdir, ref, subdir, group) in enumerate(args.git_tree):
        commit, read_ = read_git_tree(gitdir, ref, subdir, group)
        artifacts.update(read_)
        name = args.repository_name[i] if i < len(args.repository_name) else gitdir
        sources.append({"kind": "git", "repository": name, "ref": ref, "commit": commit,
                        "path": subdir, "groupId": group,
                        "artifacts": sorted(f"{g}:{a}:{v}" for g, a, v in read_)})
    packages = build_index(artifacts)
    args.out.write_bytes(render(document(packages=packages, sources=sources)))
    print(f"{len(artifacts)} artifacts, {len(packages)} prefixes -> {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
