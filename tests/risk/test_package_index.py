"""The committed Java package index is what scripts/gen_package_index.py writes (its format,
byte for byte), and the generator's folding gives artifacts, not groups."""

from __future__ import annotations

import gzip
import json
import zipfile
from importlib import resources

from scripts.gen_package_index import FORMAT, build_index, document, read_maven_repo, render


def _committed() -> bytes:
    return resources.files("trustrank.risk").joinpath("data", "java_packages.json.gz").read_bytes()


def test_the_committed_index_is_the_generators_output_format():
    raw = _committed()
    doc = json.loads(gzip.decompress(raw))
    assert doc["format"] == FORMAT
    # Rendered again from what it says, it is the same bytes: canonical, no timestamp.
    assert render(document(packages=doc["packages"], sources=doc["sources"])) == raw
    kinds = {s["kind"] for s in doc["sources"]}
    assert kinds == {"maven-repo", "git"}
    git = next(s for s in doc["sources"] if s["kind"] == "git")
    assert git["repository"] == "spring-projects/spring-boot" and len(git["commit"]) == 40
    repo = next(s for s in doc["sources"] if s["kind"] == "maven-repo")
    assert any(a.startswith("com.h2database:h2:") for a in repo["artifacts"])
    for prefix, coords in doc["packages"].items():
        assert prefix and coords == sorted(coords)
        assert all(c.count(":") == 1 for c in coords)


def _jar(path, classes):
    with zipfile.ZipFile(path, "w") as z:
        for name in classes:
            z.writestr(name, b"\xca\xfe\xba\xbe")


def test_the_generator_folds_packages_into_artifact_prefixes(tmp_path):
    repo = tmp_path / "repo"
    layout = {
        ("org/springframework/boot", "spring-boot", "3.5.0"): [
            "org/springframework/boot/SpringApplication.class",
            "org/springframework/boot/web/servlet/ServletRegistrationBean.class"],
        ("org/springframework/boot", "spring-boot-autoconfigure", "3.5.0"): [
            "org/springframework/boot/autoconfigure/web/servlet/error/BasicErrorController.class",
            "org/springframework/boot/autoconfigure/jdbc/DataSourceProperties.class"],
        ("com/h2database", "h2", "2.2.224"): ["org/h2/Driver.class",
                                              "org/h2/jdbc/JdbcConnection.class"],
    }
    for (group, artifact, version), classes in layout.items():
        d = repo / group / artifact / version
        d.mkdir(parents=True)
        _jar(d / f"{artifact}-{version}.jar", classes)
        (d / f"{artifact}-{version}-sources.jar").write_bytes(b"")  # a classifier: skipped
    artifacts = read_maven_repo(repo)
    assert set(artifacts) == {("org.springframework.boot", "spring-boot", "3.5.0"),
                              ("org.springframework.boot", "spring-boot-autoconfigure", "3.5.0"),
                              ("com.h2database", "h2", "2.2.224")}
    index = build_index(artifacts)
    assert index["org.springframework.boot.autoconfigure"] == [
        "org.springframework.boot:spring-boot-autoconfigure"]
    assert index["org.springframework.boot"] == ["org.springframework.boot:spring-boot"]
    assert index["org.h2"] == ["com.h2database:h2"]
    # Folded: nothing under a prefix that already says the same.
    assert "org.springframework.boot.web.servlet" not in index
    assert "org.h2.jdbc" not in index
