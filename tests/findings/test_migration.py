"""The move to one findings table: rows of the three former finding tables and the two audit
tables, written in their old shape, come out of the migrations in the new one."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.utils import timezone

from trustrank.findings.models import Finding
from trustrank.findings.records import AuditEvent, Comment
from trustrank.identity.services.findings import identity_finding_fingerprint
from trustrank.runtime.broken_context import broken_context_fingerprint

pytestmark = pytest.mark.django_db(transaction=True)

BEFORE = [
    ("vulns", "0002_auditevent_append_only"),
    ("identity", "0001_initial"),
    ("runtime", "0001_initial"),
    ("findings", None),
]


def _migrate(targets):
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(targets)
    nodes = [t for t in targets if t[1] is not None]
    return MigrationExecutor(connection).loader.project_state(nodes).apps


def test_old_rows_arrive_in_the_one_findings_table():
    old = _migrate(BEFORE)
    now = timezone.now().replace(microsecond=0)
    Team = old.get_model("accounts", "Team")
    User = old.get_model("auth", "User")
    Project = old.get_model("inventory", "Project")
    ProjectVersion = old.get_model("inventory", "ProjectVersion")
    team = Team.objects.create(name="old-shape")
    ann = User.objects.create(username="ann")
    project = Project.objects.create(team=team, name="shop")
    pv = ProjectVersion.objects.create(project=project, version="1.0")

    VFinding = old.get_model("vulns", "Finding")
    vf = VFinding.objects.create(
        team=team, kind="vulnerability", source="osv", fingerprint="f" * 64, project=project,
        project_version=pv, component_key="pkg:npm/lodash@4.17.15", component_name="lodash",
        component_version="4.17.15", ecosystem="npm", package_name="lodash",
        vuln_id="CVE-2020-8203", aliases=["CVE-2020-8203", "GHSA-p6mc-m468-83gw"],
        cve_id="CVE-2020-8203", title="Prototype pollution", match_status="affected",
        match_reason="in range", fixed_versions=["4.17.19"], cvss_score=7.4, severity="high",
        severity_score=7.4, in_kev=True, epss=0.5, state="not_affected",
        justification="code_not_reachable", response=["will_not_fix"], detail="unused",
        first_seen=now, last_seen=now,
    )
    old.get_model("vulns", "FindingComment").objects.create(
        finding=vf, author=ann, author_label="ann", body="checked", created_at=now
    )
    VAudit = old.get_model("vulns", "AuditEvent")
    VAudit.objects.create(team=team, subject_type="vulns.finding", subject_id=vf.pk,
                          action="created", actor_label="system: matching", created_at=now)
    VAudit.objects.create(team=team, subject_type="vulns.finding", subject_id=vf.pk,
                          action="state_changed", actor=ann, actor_label="ann",
                          before={"state": "in_triage"}, after={"state": "not_affected"},
                          reason="unused code", created_at=now + timedelta(seconds=1))

    Identity = old.get_model("identity", "Identity")
    identity = Identity.objects.create(team=team, environment="prod",
                                       spiffe_id="spiffe://prod.example/web",
                                       trust_domain="prod.example")
    IFinding = old.get_model("identity", "IdentityFinding")
    expired = IFinding.objects.create(
        team=team, environment="prod", kind="expired", key="ab" * 32, severity="critical",
        title="Certificate expired", status="open", evidence={"not_after": "2020-01-01"},
        spiffe_id="spiffe://prod.example/web", last_seen_at=now,
    )
    gone = IFinding.objects.create(
        team=team, environment="prod", kind="unmapped", key="spiffe://prod.example/job",
        severity="low", title="Unmapped identity", status="resolved", resolved_at=now,
        spiffe_id="spiffe://prod.example/job", last_seen_at=now,
    )
    IAudit = old.get_model("identity", "IdentityAuditEvent")
    IAudit.objects.create(team=team, environment="prod", finding=expired, action="opened",
                          actor="job:1", data={"title": "Certificate expired"})
    IAudit.objects.create(team=team, environment="prod", finding=gone, action="resolved",
                          actor="system", data={"title": "x", "reason": "no longer observed"})
    IAudit.objects.create(team=team, environment="prod", action="mapping_set", actor="ann",
                          data={"spiffe_id": "spiffe://prod.example/web",
                                "before": {"service_name": ""},
                                "after": {"service_name": "web"}})

    Environment = old.get_model("runtime", "Environment")
    Service = old.get_model("runtime", "Service")
    env = Environment.objects.create(team=team, name="prod", first_seen=now, last_seen=now)
    gateway = Service.objects.create(environment=env, name="gateway", first_seen=now,
                                     last_seen=now)
    payments = Service.objects.create(environment=env, name="payments", first_seen=now,
                                      last_seen=now)
    old.get_model("runtime", "BrokenContextFinding").objects.create(
        environment=env, caller=gateway, callee=payments, occurrences=7,
        examples=[{"caller_trace_id": "a" * 32}], status="open", first_seen=now, last_seen=now,
    )

    _migrate(MigrationExecutor(connection).loader.graph.leaf_nodes())

    v = Finding.objects.get(pk=vf.pk)  # same id: links stay valid
    assert (v.kind, v.vuln_id, v.state, v.justification) == (
        "vulnerability", "CVE-2020-8203", "not_affected", "code_not_reachable",
    )
    assert v.in_kev and v.fixed_versions == ["4.17.19"] and v.project_version_id == pv.pk
    assert v.baseline_priority == pytest.approx(7.4 * 6 + 0.5 * 25 + 15)
    assert Comment.objects.get(finding=v).body == "checked"
    trail = list(AuditEvent.objects.filter(finding=v).order_by("created_at"))
    assert [e.action for e in trail] == ["created", "state_changed"]
    assert (trail[1].actor_kind, trail[1].actor_user_id, trail[1].reason) == (
        "user", ann.pk, "unused code",
    )
    assert trail[0].actor_kind == "system"

    e = Finding.objects.get(kind="identity", category="expired")
    assert e.fingerprint == identity_finding_fingerprint(
        environment="prod", category="expired", key="ab" * 32
    )
    assert (e.state, e.severity, e.identity_id, e.environment) == (
        "in_triage", "critical", identity.pk, "prod",
    )
    assert e.evidence == {"not_after": "2020-01-01"}
    assert [x.action for x in e.events.all()] == ["created"]
    g = Finding.objects.get(kind="identity", category="unmapped")
    assert g.state == "resolved" and g.auto_resolved
    assert g.events.get().action == "auto_resolved"
    assert g.events.get().reason == "no longer observed"
    mapping = AuditEvent.objects.get(action="mapping_set")
    assert (mapping.subject_type, mapping.subject_id) == (
        "identity.mapping", "spiffe://prod.example/web",
    )
    assert mapping.after == {"service_name": "web"} and mapping.actor_kind == "user"

    b = Finding.objects.get(kind="reliability")
    assert b.fingerprint == broken_context_fingerprint(
        environment="prod", caller=("", "gateway"), callee=("", "payments")
    )
    assert b.evidence["occurrences"] == 7 and b.service.name == "payments"
    assert b.events.get().action == "created"
    assert {f.team_id for f in Finding.objects.all()} == {team.pk}
    # New rows get ids after the moved ones.
    assert Finding.objects.order_by("pk").first().pk == vf.pk
