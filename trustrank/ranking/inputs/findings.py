"""Open findings as the engine's records, with their advisories' CVSS vectors and their CVEs'
EPSS dates: a million rows read in chunks through a server-side cursor, one chunk ahead."""

from __future__ import annotations

import contextlib
import queue
import threading
from array import array
from collections.abc import Callable, Iterable, Iterator, MutableMapping
from datetime import datetime
from itertools import repeat
from operator import itemgetter
from typing import Any, cast

import numpy as np
from django.db import transaction

from trustrank.findings.choices import OPEN_STATES
from trustrank.findings.services.due_dates import PolicyDays, settled_decision_sql
from trustrank.lib.db import binary_rows
from trustrank.ranking.inputs.ids import FindingIds
from trustrank.ranking.inputs.settled import SettledDecisions
from trustrank.risk import inputs as ri
from trustrank.risk.libraries import component_key_from_purl
from trustrank.vulns.models import Advisory, EpssLatest

CHUNK = 20_000


def _vectors(advisory_ids: set[str]) -> dict[str, str]:
    """Advisory id -> its CVSS vector (v4 preferred, then v3)."""
    out: dict[str, str] = {}
    ids = sorted(advisory_ids)
    for i in range(0, len(ids), 5000):
        for aid, severity in Advisory.objects.filter(id__in=ids[i : i + 5000]).values_list(
            "id", "severity"
        ):
            best = ""
            for s in severity or []:
                vector = str(s.get("vector") or s.get("score") or "")
                if vector.startswith("CVSS:4") or (vector.startswith("CVSS:3") and not best):
                    best = vector
            if best:
                out[aid] = best
    return out


_FINDINGS_SQL = """
SELECT f.id, f.kind, f.vuln_id, f.severity, f.cvss_score, f.in_kev, f.kev_date_added, f.epss,
       f.epss_percentile, f.cve_id, f.advisory_id, f.project_version_id, f.component_purl,
       -- Columns only some rows read are sent only for those rows: a million findings
       -- fetched at once hold every value in memory.
       CASE WHEN COALESCE(f.component_purl, '') = '' THEN f.component_key END,
       CASE WHEN COALESCE(f.component_purl, '') = '' THEN f.component_name END,
       {other},
       f.baseline_priority,
       {subject},
       f.state IN ('in_triage', 'exploitable'),
       {settled},
       -- Last, so the positions above stay put: a vector of the finding's own (NVD's,
       -- when the advisory has none) and where its severity came from.
       f.cvss_vector, f.severity_source,
       -- The component search group its ranked row is stored with (findings.SearchGroup).
       f.search_group
  FROM findings_finding f
  {joins}
  {due_join}
 WHERE f.team_id = %s AND {where}
 ORDER BY f.id
"""

# What only identity and reliability findings read: their category, environment, the
# service they are about and a short subject.
_OTHER_COLUMNS = (
    "CASE WHEN f.kind <> 'vulnerability' THEN f.category END, "
    "CASE WHEN f.kind <> 'vulnerability' THEN f.environment END, "
    "CASE WHEN f.kind <> 'vulnerability' THEN COALESCE(s.name, NULLIF(i.service_name, '')) "
    "END"
)
_OTHER_SUBJECT = "CASE WHEN f.kind <> 'vulnerability' THEN left(f.fingerprint, 16) END"
_OTHER_JOINS = (
    "LEFT JOIN runtime_service s ON s.id = f.service_id "
    # An identity finding is about the service its SPIFFE ID is mapped to.
    "LEFT JOIN identity_identity i ON i.id = f.identity_id"
)


def _findings_statements(where: str, settled: str, due_join: str, *, split: bool) -> list[str]:
    """The findings read: one statement, or (`split`) one for vulnerabilities, which need
    neither the joins nor the other kinds' columns (a million rows: the joins alone were
    a second of PostgreSQL's time), and one for the other kinds."""
    if not split:
        return [_FINDINGS_SQL.format(other=_OTHER_COLUMNS, subject=_OTHER_SUBJECT,
                                     joins=_OTHER_JOINS, due_join=due_join, settled=settled,
                                     where=where)]
    return [
        _FINDINGS_SQL.format(other="NULL, NULL, NULL", subject="NULL", joins="",
                             due_join=due_join, settled=settled,
                             where=f"f.kind = 'vulnerability' AND {where}"),
        _FINDINGS_SQL.format(other=_OTHER_COLUMNS, subject=_OTHER_SUBJECT,
                             joins=_OTHER_JOINS, due_join=due_join, settled=settled,
                             where=f"f.kind <> 'vulnerability' AND {where}"),
    ]


def findings_read(
    team_id: int, *, changed_since: datetime | None = None,
    settled: MutableMapping[int, str] | SettledDecisions | None = None,
    policy: PolicyDays | None = None, unsettled_rows: set[int] | None = None,
) -> tuple[list[ri.Finding], FindingIds, set[str]]:
    """(open findings, their database ids, ids that left the open states). With
    `changed_since`, only findings written since then (an incremental run's delta). With
    `settled` and `policy`, `settled` receives each open finding's decision whose due date
    is settled under `policy` (`settled_decision_sql`), and `unsettled_rows` the open
    findings whose due-date row is settled for none."""
    # Raw rows, not the ORM: a million findings is the design point, and building model
    # rows (or even values_list tuples) costs several times the fetch itself.
    assert set(OPEN_STATES) == {"in_triage", "exploitable"}
    params: list[Any]
    settled_sql, settled_params = (
        settled_decision_sql(policy) if settled is not None and policy is not None
        else ("NULL", [])
    )
    due_join = (
        "LEFT JOIN findings_findingdue d ON d.finding_id = f.id" if settled_params else ""
    )
    if changed_since is None:
        statements = _findings_statements("f.state IN ('in_triage', 'exploitable')",
                                          settled_sql, due_join, split=True)
        params = [*settled_params, team_id]
    else:
        statements = _findings_statements("f.updated_at >= %s", settled_sql, due_join,
                                          split=False)
        params = [*settled_params, team_id, changed_since]
    note_settled = settled.__setitem__ if settled is not None else None
    findings: list[ri.Finding] = []
    ids = array("q")  # the database id of each open finding
    groups = array("q")  # and its component search group
    closed: set[str] = set()
    keys: dict[str, str] = {}
    vectors: dict[str, str] = {}
    advisories_seen: set[str] = set()
    epss_dates: dict[str, Any] = {}
    cves_seen: set[str] = set()
    # One object per distinct value for the strings findings repeat (the driver makes a
    # new one per row): the inputs stay in memory for the run and the next.
    shared: dict[Any, Any] = {}
    share = shared.setdefault
    # The same for the scores (CVSS, EPSS, percentile, baseline): a finding's are its
    # advisory's and CVE's, shared by every finding of them, yet the driver makes four
    # float objects per row (96 bytes a finding, kept with the records).
    floats: dict[Any, Any] = {}
    fshare = _float_sharer(floats)
    versions: dict[Any, str] = {}
    vuln = ri.Finding
    append = findings.append
    # A server-side cursor read in chunks: the driver never holds a million rows at once
    # (the memory it frees would stay with the process, outside Python's own arenas).
    def chunks() -> Iterator[list[tuple[Any, ...]]]:
        for sql in statements:
            with binary_rows(sql, params) as cur:
                yield from _prefetched(cur.fetchmany)

    with transaction.atomic():
        for chunk in chunks():
            if _vulnerabilities_only(chunk):
                _add_vulnerabilities(
                    chunk, findings, ids, groups, keys=keys, versions=versions, vectors=vectors,
                    epss_dates=epss_dates, share=share, floats=floats,
                    settled=note_settled,
                    unsettled_rows=unsettled_rows, advisories_seen=advisories_seen,
                    cves_seen=cves_seen,
                )
                continue
            closed.update(str(r[0]) for r in chunk if not r[20])
            _lookups(
                {r[10] for r in chunk}, {r[9] for r in chunk}, vectors=vectors,
                epss_dates=epss_dates, advisories_seen=advisories_seen, cves_seen=cves_seen,
            )
            for (pk, kind, vuln_id, severity, cvss, in_kev, kev_date, epss, pct, cve,
                 advisory_id, pv_id, purl, ckey, cname, category, env, service, baseline,
                 subject, is_open, settled_decision, own_vector, severity_source,
                 group) in chunk:
                if not is_open:
                    continue
                fid = str(pk)
                ids.append(pk)
                groups.append(group)
                if settled_decision is not None and note_settled is not None:
                    if settled_decision:
                        note_settled(pk, share(settled_decision, settled_decision))
                    elif unsettled_rows is not None:
                        unsettled_rows.add(pk)
                if kind == "vulnerability":
                    key = keys.get(purl) if purl else None
                    if key is None:
                        key = component_key_from_purl(purl) if purl else (cname or ckey)
                        if purl:
                            keys[purl] = key
                    pv = versions.get(pv_id)
                    if pv is None:
                        pv = versions[pv_id] = str(pv_id or "")
                    # Positional, in the field order of trustrank.risk.inputs.Finding: a
                    # million keyword calls cost a second.
                    append(
                        vuln(
                            fid, "vulnerability", "", share(vuln_id, vuln_id),
                            share(severity, severity), fshare(cvss),
                            _vector(own_vector, advisory_id, vectors), in_kev,
                            share(kev_date, kev_date), fshare(epss), fshare(pct),
                            epss_dates.get(cve), pv, key, "", "",
                            fshare(float(baseline or 0.0)), "",
                            share(severity_source, severity_source),
                        )
                    )
                else:
                    append(
                        ri.Finding(
                            id=fid, kind=cast(ri.FindingKind, kind), sub_kind=category,
                            severity=severity, environment=env, service=service or "",
                            baseline=fshare(float(baseline or 0.0)), subject=subject,
                        )
                    )
    return findings, FindingIds(ids, groups=groups), closed


def _prefetched(
    fetch: Callable[[int], list[tuple[Any, ...]]],
) -> Iterator[list[tuple[Any, ...]]]:
    """`fetch(CHUNK)`'s chunks until an empty one, fetched by a thread one chunk ahead:
    PostgreSQL reads the next chunk (seconds of its time over a million findings) while
    this thread turns the last one into records, instead of each waiting for the other.
    The connection is psycopg's, which serialises its users; the caller issues no other
    statement on it while this runs, save the few lookups between chunks."""
    chunks: queue.Queue[list[tuple[Any, ...]] | BaseException | None] = queue.Queue(2)
    stop = threading.Event()

    def run() -> None:
        try:
            while not stop.is_set() and (chunk := fetch(CHUNK)):
                chunks.put(chunk)
            chunks.put(None)
        except BaseException as exc:  # re-raised below, in the caller's thread
            chunks.put(exc)

    thread = threading.Thread(target=run, name="findings-read", daemon=True)
    thread.start()
    try:
        while (item := chunks.get()) is not None:
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        # Abandoned early (an error while a chunk was turned into records): the thread
        # stops after its current fetch, before the cursor is closed under it.
        stop.set()
        while thread.is_alive():
            with contextlib.suppress(queue.Empty):
                chunks.get(timeout=0.1)
        thread.join()

def _lookups(
    advisory_ids: set[str | None], cve_ids: set[str | None], *, vectors: dict[str, str],
    epss_dates: dict[str, Any], advisories_seen: set[str], cves_seen: set[str],
) -> None:
    """The CVSS vectors and EPSS dates of the advisories and CVEs not looked up yet."""
    advisories = {a for a in advisory_ids if a} - advisories_seen
    if advisories:
        vectors.update(_vectors(advisories))
        advisories_seen |= advisories
    cves = sorted({c for c in cve_ids if c} - cves_seen)
    if cves:
        cves_seen.update(cves)
        for i in range(0, len(cves), 5000):
            epss_dates.update(
                EpssLatest.objects.filter(cve_id__in=cves[i : i + 5000]).values_list(
                    "cve_id", "score_date"
                )
            )


def _vulnerabilities_only(chunk: list[tuple[Any, ...]]) -> bool:
    """Whether every row of a findings chunk is an open vulnerability with a purl and a
    non-zero baseline: such a chunk is turned into records column by column."""
    kinds, purls, baselines, open_ = (
        list(map(itemgetter(i), chunk)) for i in (1, 12, 18, 20))
    return (kinds.count("vulnerability") == len(chunk) and all(purls) and all(baselines)
            and all(open_))


def _add_vulnerabilities(
    chunk: list[tuple[Any, ...]], findings: list[ri.Finding], ids: array[int],
    groups: array[int], *,
    keys: dict[str, str], versions: dict[Any, str], vectors: dict[str, str],
    epss_dates: dict[str, Any], share: Callable[[Any, Any], Any], floats: dict[Any, Any],
    settled: Callable[[int, str], None] | None, unsettled_rows: set[int] | None,
    advisories_seen: set[str], cves_seen: set[str],
) -> None:
    """A chunk of open vulnerabilities (`_vulnerabilities_only`) as records, column by
    column: the same records, ids and settled decisions as `findings_read`' loop gives row by
    row, each column a pass in C (a million rows through a Python loop cost seconds)."""
    (pks, _kind, vuln_ids, severities, cvss, in_kev, kev_dates, epss, pct, cves, advisories,
     pv_ids, purls, _ckey, _cname, _category, _env, _service, baselines, _subject, _open,
     decisions, own_vectors, sources, search_groups) = zip(*chunk, strict=True)
    n = len(chunk)
    _lookups(set(advisories), set(cves), vectors=vectors, epss_dates=epss_dates,
             advisories_seen=advisories_seen, cves_seen=cves_seen)
    fids = list(map(str, pks))
    ids.extend(pks)
    groups.extend(search_groups)
    if settled is not None and decisions.count(None) != n:
        for pk, decision in zip(pks, decisions, strict=True):
            if decision:
                settled(pk, share(decision, decision))
            elif decision is not None and unsettled_rows is not None:
                unsettled_rows.add(pk)
    for purl in set(purls) - keys.keys():
        keys[purl] = component_key_from_purl(purl)
    for pv_id in set(pv_ids) - versions.keys():
        versions[pv_id] = str(pv_id or "")
    findings.extend(ri.findings_from_columns(n, {
        "id": fids, "kind": repeat("vulnerability"), "sub_kind": repeat(""),
        "vuln_id": map(share, vuln_ids, vuln_ids),
        "severity": map(share, severities, severities),
        "cvss_score": _shared_floats(cvss, floats),
        "cvss_vector": map(_vector, own_vectors, advisories, repeat(vectors)),
        "in_kev": in_kev,
        "kev_date": map(share, kev_dates, kev_dates), "epss": _shared_floats(epss, floats),
        "epss_percentile": _shared_floats(pct, floats),
        "epss_date": map(epss_dates.get, cves), "project_version": map(versions.__getitem__,
                                                                       pv_ids),
        "component_key": map(keys.__getitem__, purls), "environment": repeat(""),
        "service": repeat(""),
        "baseline": _shared_floats(tuple(map(float, baselines)), floats),
        "subject": repeat(""),
        "severity_source": map(share, sources, sources),
    }))


def _float_sharer(floats: dict[Any, Any]) -> Callable[[Any], Any]:
    """One float object per distinct value, through `floats`. A zero is left as it is:
    -0.0 equals 0.0, and sharing must not change a record's value as orjson writes it (the
    inputs digest)."""

    def fshare(value: Any) -> Any:
        return value if not value else floats.setdefault(value, value)

    return fshare


def _shared_floats(values: tuple[float | None, ...],
                   floats: dict[Any, Any]) -> Iterable[float | None]:
    """`values` with one float object per distinct value, through `floats` (a pass in C);
    `values` as they are when any has its sign bit set, so that no -0.0 is given a 0.0
    (they are equal, as dictionary keys too) nor a 0.0 a -0.0."""
    if np.signbit(np.array(values, dtype=np.float64)).any():
        return values
    return map(floats.setdefault, values, values)


def _vector(own: str | None, advisory_id: str | None, vectors: dict[str, str]) -> str:
    """The finding's own vector (set at matching since NVD severities), else its advisory's
    (findings matched before that)."""
    return own or vectors.get(advisory_id or "", "")
