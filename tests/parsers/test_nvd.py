"""The NVD CVE API 2.0 page parser on real NVD records (tests/data/nvd, see its PROVENANCE):
which metric a CVE gets, gzip, streaming, and the errors a bad page gets."""

from __future__ import annotations

import copy
import gzip
import io
import json
from pathlib import Path
from typing import Any

import pytest

from trustrank.parsers.nvd import NvdError, NvdPage, parse_nvd

PAGE_FILE = Path(__file__).resolve().parent.parent / "data" / "nvd" / "nvd-cves-page.json"
PAGE: dict[str, Any] = json.loads(PAGE_FILE.read_bytes())


def _record(cve_id: str) -> dict[str, Any]:
    return copy.deepcopy(next(v for v in PAGE["vulnerabilities"] if v["cve"]["id"] == cve_id))


def _page(*records: dict[str, Any], **header: Any) -> bytes:
    doc = {**{k: v for k, v in PAGE.items() if k != "vulnerabilities"}, **header}
    doc["vulnerabilities"] = list(records)
    doc["resultsPerPage"] = doc["totalResults"] = len(records)
    return json.dumps(doc).encode()


def _by_id(payload: bytes) -> dict[str, Any]:
    return {c.cve_id: c.severity for c in parse_nvd(payload, filename="page.json")}


def test_the_real_page_gives_one_severity_per_scored_cve():
    got = _by_id(PAGE_FILE.read_bytes())
    assert set(got) == {v["cve"]["id"] for v in PAGE["vulnerabilities"]}
    s = got["CVE-2023-39325"]
    assert (s.version, s.score, s.severity, s.source, s.source_type) == (
        "3.1", 7.5, "high", "nvd@nist.gov", "Primary")
    assert s.vector == "CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:U/C:N/I:N/A:H"
    assert s.published.isoformat() == "2023-10-11T22:15:09.880000+00:00"
    assert s.last_modified.isoformat() == "2024-01-21T02:02:56.727000+00:00"
    # NVD has not scored it (status Received, "metrics": {}).
    assert got["CVE-2025-58190"] is None


def test_v31_is_preferred_over_v40_and_v2():
    got = _by_id(PAGE_FILE.read_bytes())
    # CVE-2025-64329: the CNA's v4.0 (6.9) is listed first, NVD's v3.1 (5.5) is taken.
    assert (got["CVE-2025-64329"].version, got["CVE-2025-64329"].score) == ("3.1", 5.5)
    # CVE-2022-29526: v3.1 5.3 over v2 5.0.
    assert (got["CVE-2022-29526"].version, got["CVE-2022-29526"].score) == ("3.1", 5.3)


def test_v40_is_taken_when_there_is_no_v3_and_v2_last():
    only_v4 = _record("CVE-2025-64329")
    del only_v4["cve"]["metrics"]["cvssMetricV31"]
    only_v2 = _record("CVE-2022-29526")
    del only_v2["cve"]["metrics"]["cvssMetricV31"]
    got = _by_id(_page(only_v4, only_v2))
    v4 = got["CVE-2025-64329"]
    assert (v4.version, v4.score, v4.severity, v4.source_type) == ("4.0", 6.9, "medium",
                                                                   "Secondary")
    assert v4.vector.startswith("CVSS:4.0/AV:L/AC:L/AT:N/")
    v2 = got["CVE-2022-29526"]
    assert (v2.version, v2.score, v2.severity, v2.vector) == (
        "2.0", 5.0, "medium", "AV:N/AC:L/Au:N/C:P/I:N/A:N")


def test_v30_counts_as_v3_after_v31():
    record = _record("CVE-2022-29526")
    metrics = record["cve"]["metrics"]
    v31 = metrics.pop("cvssMetricV31")[0]
    v30 = copy.deepcopy(v31)
    v30["cvssData"].update(version="3.0", vectorString=v31["cvssData"]["vectorString"].replace(
        "CVSS:3.1", "CVSS:3.0"))
    metrics["cvssMetricV30"] = [v30]
    s = _by_id(_page(record))["CVE-2022-29526"]
    assert (s.version, s.score, s.vector[:8]) == ("3.0", 5.3, "CVSS:3.0")


def test_nvds_primary_metric_wins_over_a_secondary_listed_first():
    # CVE-2025-54410: GitHub's Secondary 3.3 comes first, NVD's Primary 5.2 second.
    s = _by_id(PAGE_FILE.read_bytes())["CVE-2025-54410"]
    assert (s.score, s.source, s.source_type, s.severity) == (5.2, "nvd@nist.gov", "Primary",
                                                               "medium")


def test_without_a_primary_the_first_secondary_is_taken():
    s = _by_id(PAGE_FILE.read_bytes())["CVE-2026-39821"]
    assert (s.score, s.source_type) == (9.6, "Secondary")
    assert s.source == "134c704f-9b21-4f2e-91b3-4a467353bcc0"


def test_the_score_is_the_vectors_and_a_differing_base_score_is_noted():
    record = _record("CVE-2023-39325")
    record["cve"]["metrics"]["cvssMetricV31"][0]["cvssData"]["baseScore"] = 9.9
    s = _by_id(_page(record))["CVE-2023-39325"]
    assert s.score == 7.5 and s.stated_score == 9.9 and s.score_mismatch
    assert not _by_id(PAGE_FILE.read_bytes())["CVE-2023-39325"].score_mismatch


def test_a_gzip_page_reads_the_same_as_the_plain_one():
    plain = PAGE_FILE.read_bytes()
    assert _by_id(gzip.compress(plain)) == _by_id(plain)


def test_a_page_is_read_as_a_stream_from_a_file_object():
    page = NvdPage(io.BytesIO(gzip.compress(PAGE_FILE.read_bytes())), filename="page.json.gz")
    ids = [c.cve_id for c in page]
    assert len(ids) == len(PAGE["vulnerabilities"]) == page.cves
    assert page.header["format"] == "NVD_CVE" and page.header["totalResults"] == len(ids)


def test_a_2000_cve_page_is_parsed_without_holding_the_document():
    """2,000 real records (one repeated with new ids, with 200 references as NVD lists them
    for popular CVEs): read as a stream (measured with tracemalloc: the 36 MB page parses in
    0.8 s with a peak of about 1 MB; json.loads of it peaks at 210 MB)."""
    base = _record("CVE-2025-31133")
    base["cve"]["references"] = [
        {"url": f"https://example.org/advisory/{i}", "source": "nvd@nist.gov", "tags": ["x"]}
        for i in range(200)
    ]
    one = json.dumps(base).replace("CVE-2025-31133", "CVE-2025-1{n:05d}")
    items = ",".join(one.replace("{n:05d}", f"{i:05d}") for i in range(2000))
    head = _page().decode().replace('"vulnerabilities": []', '"vulnerabilities": [' + items + "]")
    plain = head.encode()
    assert len(plain) > 20_000_000
    # The records come while the page is still being read (the first after a few hundred
    # kilobytes of 36 MB; the header pass stops at the array), so the page is never whole.
    stream = _ReadCounter(plain)
    page = iter(NvdPage(stream, filename="big.json"))
    first = next(page)
    assert first.cve_id == "CVE-2025-100000" and stream.furthest < len(plain) / 20
    assert 1 + sum(1 for c in page if c.severity) == 2000
    assert len(list(NvdPage(gzip.compress(plain, compresslevel=1)))) == 2000


class _ReadCounter(io.BytesIO):
    """A file whose furthest read position is known."""

    furthest = 0

    def read(self, size: int | None = -1) -> bytes:
        data = super().read(size)
        self.furthest = max(self.furthest, self.tell())
        return data


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        (b"", "not JSON"),
        (b"<html>rate limited</html>", "not JSON"),
        (b'{"format": "NVD_CVE", "version": "2.0", "vulnerabilities": [', "not JSON"),
        (b"[1, 2]", "top level is no object"),
        (b'{"format": "NVD_CPE", "version": "2.0", "products": []}', "format 'NVD_CPE'"),
        (b'{"format": "NVD_CVE", "version": "1.1", "vulnerabilities": []}', "version '1.1'"),
        (b'{"resultsPerPage": 0, "vulnerabilities": []}', "not an NVD CVE API 2.0 page"),
        (b"\x1f\x8b\x08\x00broken", "gzip"),
    ],
)
def test_a_bad_file_is_refused_naming_the_file_and_what_is_wrong(payload, message):
    with pytest.raises(NvdError, match=message) as caught:
        parse_nvd(payload, filename="nvdcve-2.0-2024.json")
    assert str(caught.value).startswith("nvdcve-2.0-2024.json: ")


def test_a_bad_vector_is_refused_naming_the_cve():
    record = _record("CVE-2025-54410")
    record["cve"]["metrics"]["cvssMetricV31"][1]["cvssData"]["vectorString"] = "CVSS:3.1/AV:Q"
    with pytest.raises(NvdError, match=r"bad CVSS v3\.1 vector at CVE-2025-54410"):
        parse_nvd(_page(_record("CVE-2023-39325"), record), filename="p.json")


def test_a_record_without_a_cve_id_is_refused():
    record = _record("CVE-2023-39325")
    record["cve"]["id"] = "GHSA-xxxx"
    with pytest.raises(NvdError, match="record 1 has no CVE id"):
        parse_nvd(_page(record))


def test_a_rejected_cve_gets_no_severity():
    record = _record("CVE-2023-39325")
    record["cve"]["vulnStatus"] = "Rejected"
    assert _by_id(_page(record)) == {"CVE-2023-39325": None}
