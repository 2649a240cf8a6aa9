"""The audit log: GET /api/v1/audit-events and the /audit/ page, the same filters
(AuditEventFilterSet), only the caller's teams, the chain status on the page."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection

from trustrank.accounts.principal import principal_for_key, principal_for_user
from trustrank.accounts.services import api_key_issue
from trustrank.findings.models import Finding
from trustrank.findings.records import AuditEvent
from trustrank.findings.services.audit import Actor, audit_event_record
from trustrank.inventory.models import Project

pytestmark = pytest.mark.django_db

DAY1 = datetime(2026, 11, 1, 9, 30, tzinfo=UTC)
DAY2 = datetime(2026, 11, 2, 15, 0, tzinfo=UTC)
DAY3 = datetime(2026, 11, 3, 8, 0, tzinfo=UTC)


def finding(team, kind, name, project=None):
    return Finding.objects.create(team=team, kind=kind, source="osv", fingerprint=name,
                                  title=f"{kind} {name}", project=project)


@pytest.fixture
def trail(team, other_team, make_user):
    """payments: a vulnerability in project shop and an identity finding, events by a system
    job, a person and a key over three days; intruders: one event of their own."""
    shop = Project.objects.create(team=team, name="shop")
    vuln = finding(team, "vulnerability", "v1", project=shop)
    ident = finding(team, "identity", "i1")
    ann = make_user("ann", team=team)
    key = api_key_issue(team=team, name="ci", scopes=["triage"]).api_key
    by_ann = Actor.of(principal_for_user(ann))
    by_key = Actor.of(principal_for_key(key))
    system = Actor.system("matching")
    e = {
        "created_v": audit_event_record(actor=system, action="created", team_id=team.pk,
                                        finding_id=vuln.pk, after={"state": "in_triage"},
                                        at=DAY1),
        "created_i": audit_event_record(actor=system, action="created", team_id=team.pk,
                                        finding_id=ident.pk, at=DAY1),
        "triaged": audit_event_record(actor=by_ann, action="state_changed", team_id=team.pk,
                                      finding_id=vuln.pk, before={"state": "in_triage"},
                                      after={"state": "not_affected"}, reason="unused code",
                                      at=DAY2),
        "commented": audit_event_record(actor=by_key, action="commented", team_id=team.pk,
                                        finding_id=ident.pk, after={"body": "rotating"},
                                        at=DAY3),
        "mapping": audit_event_record(actor=by_ann, action="mapping_set", team_id=team.pk,
                                      subject_type="identity.mapping",
                                      subject_id="spiffe://prod/web", at=DAY3),
    }
    secret = finding(other_team, "identity", "their-secret")
    audit_event_record(actor=system, action="created", team_id=other_team.pk,
                       finding_id=secret.pk, reason="their secret", at=DAY2)
    audit_event_record(actor=system, action="feed_imported", team_id=None, at=DAY2)
    return {"events": e, "ann": ann, "key": key, "shop": shop, "vuln": vuln, "ident": ident}


def ids(body):
    return [item["id"] for item in body["results"]]


def test_api_lists_the_teams_events_newest_first_with_their_links(api, team, trail):
    body = api(team, "read").get("/api/v1/audit-events").json()
    e = trail["events"]
    assert body["count"] == 5
    assert ids(body) == [e[k].pk for k in ("mapping", "commented", "triaged", "created_i",
                                           "created_v")]
    item = body["results"][2]
    assert item["at"].startswith("2026-11-02T15:00:00")
    assert (item["team"], item["team_name"]) == (team.pk, "payments")
    assert (item["actor"], item["actor_kind"], item["actor_user"]) == (
        "ann", "user", trail["ann"].pk)
    assert item["action"] == "state_changed"
    assert (item["finding"], item["finding_kind"], item["finding_title"]) == (
        trail["vuln"].pk, "vulnerability", "vulnerability v1")
    assert (item["project"], item["project_name"]) == (trail["shop"].pk, "shop")
    assert item["before"] == {"state": "in_triage"} and item["after"] == {"state": "not_affected"}
    assert item["reason"] == "unused code"
    assert item["prev_digest"] == body["results"][3]["digest"] and len(item["digest"]) == 64
    mapping = body["results"][0]
    assert mapping["subject"] == {"type": "identity.mapping", "id": "spiffe://prod/web"}
    assert mapping["finding"] is None and mapping["project"] is None


def test_api_never_shows_another_teams_events(api, team, other_team, trail):
    theirs = api(other_team, "audit:read").get("/api/v1/audit-events").json()
    assert theirs["count"] == 1 and theirs["results"][0]["reason"] == "their secret"
    mine = api(team, "audit:read").get(f"/api/v1/audit-events?team={other_team.pk}").json()
    assert mine["count"] == 0
    body = api(team, "read").get(f"/api/v1/audit-events?finding={theirs['results'][0]['finding']}")
    assert body.json()["count"] == 0


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("actor=ANN", ["mapping", "triaged"]),
        ("actor=matching", ["created_i", "created_v"]),
        ("actor=user:{ann}", ["mapping", "triaged"]),
        ("actor=key:{key}", ["commented"]),
        ("action=created", ["created_i", "created_v"]),
        ("action=created&action=commented", ["commented", "created_i", "created_v"]),
        ("action=state_changed,mapping_set", ["mapping", "triaged"]),
        ("finding_kind=identity", ["commented", "created_i"]),
        ("finding_kind=identity&finding_kind=vulnerability",
         ["commented", "triaged", "created_i", "created_v"]),
        ("project={shop}", ["triaged", "created_v"]),
        ("finding={vuln}", ["triaged", "created_v"]),
        ("since=2026-11-02", ["mapping", "commented", "triaged"]),
        ("until=2026-11-02", ["triaged", "created_i", "created_v"]),
        ("since=2026-11-02&until=2026-11-02", ["triaged"]),
        ("since=2026-11-02T15:00:00Z", ["mapping", "commented", "triaged"]),
        ("since=2026-11-02T15:00:01%2B00:00", ["mapping", "commented"]),
        ("until=2026-11-01T09:30:00", ["created_i", "created_v"]),
        ("action=created&finding_kind=vulnerability&actor=matching", ["created_v"]),
        ("action=no_such_action", []),
    ],
)
def test_api_filters(api, team, trail, query, expected):
    query = query.format(ann=trail["ann"].pk, key=trail["key"].pk, shop=trail["shop"].pk,
                         vuln=trail["vuln"].pk)
    body = api(team, "audit:read").get(f"/api/v1/audit-events?{query}").json()
    assert ids(body) == [trail["events"][k].pk for k in expected]
    assert body["count"] == len(expected)


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("actor=user:ann", "actor"),
        ("actor=key:", "actor"),
        ("action=Not An Action!", "action"),
        ("finding_kind=bogus", "finding_kind"),
        ("project=shop", "project"),
        ("finding=1.5", "finding"),
        ("since=yesterday", "since"),
        ("until=2026-13-01", "until"),
        ("since=2026-11-02T25:00:00", "since"),
    ],
)
def test_api_refuses_invalid_filters_naming_the_field(api, team, trail, query, field):
    response = api(team, "read").get(f"/api/v1/audit-events?{query}")
    assert response.status_code == 400
    assert response["Content-Type"].startswith("application/problem+json")
    body = response.json()
    # Named in the FilterSet's errors, or by the input check that runs before every view.
    assert list(body.get("errors", {})) == [field] or body.get("parameter") == field, body
    assert field in body["detail"] or field in body.get("errors", {})


def test_api_needs_read_or_audit_read(api, team, trail):
    assert api(team, "sbom:write").get("/api/v1/audit-events").status_code == 403
    assert api(team, "triage").get("/api/v1/audit-events").status_code == 403
    assert api(team, "audit:read").get("/api/v1/audit-events").status_code == 200
    assert api(team, "read").get("/api/v1/audit-events").status_code == 200


def test_api_pages_carry_count(api, team, trail):
    body = api(team, "read").get("/api/v1/audit-events?page_size=2&page=2").json()
    assert body["count"] == 5 and len(body["results"]) == 2 and body["next"] and body["previous"]


def test_page_shows_the_log_filters_and_chain_status(client, team, other_team, trail,
                                                     django_assert_max_num_queries):
    client.force_login(trail["ann"])
    # 13: the last signed checkpoint is read once for the chain status.
    with django_assert_max_num_queries(13):
        page = client.get("/audit/")
    html = page.content.decode()
    assert page.status_code == 200
    for text in ("Audit log", "unused code", "state_changed", "mapping_set", "identity.mapping",
                 "shop", 'name="actor"', 'name="action"', 'name="finding_kind"',
                 'name="project"', 'name="since"', 'name="until"', "intact",
                 trail["events"]["mapping"].digest[:10]):
        assert text in html, text
    assert "their secret" not in html
    assert '<a href="/audit/">Audit log</a>' in html  # in the nav
    filtered = client.get("/audit/?action=commented").content.decode()
    assert "rotating" in filtered and "unused code" not in filtered
    fragment = client.get("/audit/?finding_kind=vulnerability", HTTP_HX_REQUEST="true")
    assert b"<html" not in fragment.content and b"unused code" in fragment.content


def test_page_refuses_an_invalid_filter_naming_it(client, trail):
    client.force_login(trail["ann"])
    page = client.get("/audit/?since=not-a-date")
    assert page.status_code == 400
    assert b"since" in page.content and b"unused code" not in page.content


def test_page_shows_a_broken_chain(client, team, trail):
    victim = trail["events"]["triaged"]
    with connection.cursor() as cur:
        cur.execute("SET CONSTRAINTS ALL IMMEDIATE")
        cur.execute("ALTER TABLE findings_auditevent DISABLE TRIGGER findings_auditevent_no_update")
        cur.execute("UPDATE findings_auditevent SET reason = 'forged' WHERE id = %s", [victim.pk])
        cur.execute("ALTER TABLE findings_auditevent ENABLE TRIGGER findings_auditevent_no_update")
    client.force_login(trail["ann"])
    html = client.get("/audit/").content.decode()
    assert "broken" in html and f"#{victim.pk}" in html
    chain = client.get("/audit/chain/").content.decode()
    assert "broken" in chain and f"#{victim.pk}" in chain and "payments" in chain


def test_page_keyset_pages_walk_every_event(client, team, trail, monkeypatch):
    from trustrank.findings import audit_views

    monkeypatch.setattr(audit_views, "PAGE_SIZE", 2)
    client.force_login(trail["ann"])
    seen: list[int] = []
    url = "/audit/"
    for _ in range(5):
        response = client.get(url, HTTP_HX_REQUEST="true")
        seen += [e.pk for e in response.context["events"]]
        if not response.context["next_query"]:
            break
        url = "/audit/?" + response.context["next_query"]
    assert seen == sorted((e.pk for e in trail["events"].values()), reverse=True)


def test_deep_page_uses_the_team_id_index(team):
    """A page deep in a million events starts with an index range on (team, id), not a scan."""
    with connection.cursor() as cur:
        cur.execute(
            """INSERT INTO findings_auditevent (team_id, subject_type, subject_id, environment,
                 action, actor_kind, actor_label, before, after, reason, created_at,
                 prev_digest, digest)
               SELECT %s, '', '', '', 'created', 'system', 'system: bench', '{}', '{}', '',
                      now() - make_interval(secs => g), '', ''
               FROM generate_series(1, 200000) AS g""",
            [team.pk],
        )
        cur.execute("ANALYZE findings_auditevent")
        cur.execute("SELECT max(id) FROM findings_auditevent")
        top = cur.fetchone()[0]
    from trustrank.accounts.models import Role
    from trustrank.accounts.principal import Principal
    from trustrank.findings.audit_selectors import audit_event_list

    principal = Principal(scopes_by_team={team.pk: frozenset({"read", Role.AUDITOR})})
    qs = audit_event_list(principal=principal).filter(id__lt=top - 150_000)[:51]
    plan = qs.explain()
    assert "auditevent_team_id" in plan or "findings_auditevent_pkey" in plan, plan
    assert "Seq Scan on findings_auditevent" not in plan, plan
    assert AuditEvent.objects.filter(team=team).count() == 200_000
    _ = timedelta  # (imported for readers adapting the fixture's days)


def test_page_loads_a_long_chains_status_after_the_log(client, trail, monkeypatch):
    from trustrank.findings import audit_views

    monkeypatch.setattr(audit_views, "INLINE_VERIFY_LIMIT", 2)
    client.force_login(trail["ann"])
    html = client.get("/audit/").content.decode()
    assert 'hx-get="/audit/chain/"' in html and "Verifying the chains" in html
    assert "unused code" in html
    assert "intact" in client.get("/audit/chain/").content.decode()
