"""Move the three former finding tables and two audit tables into the one findings model.

- vulns_finding keeps its ids (links and bookmarks to /findings/<id>/ stay valid), its
  comments and its audit events (subject "vulns.finding" becomes the finding reference).
- identity_identityfinding rows get new ids; kind becomes the category, open/resolved becomes
  in_triage/resolved (auto-resolved), and their audit events follow them.
- runtime_brokencontextfinding rows become reliability findings with their occurrences and
  examples as evidence, each with a "created" event by the migration.
Fingerprints are computed here exactly as the services compute them (SHA-256 over the parts
joined by U+001F), so the next load finds these rows instead of creating new ones.
"""

from django.db import migrations

SEVERITY_SCORE = """CASE {col} WHEN 'critical' THEN 9.5 WHEN 'high' THEN 8.0
    WHEN 'medium' THEN 5.5 WHEN 'low' THEN 2.5 WHEN 'none' THEN 0.0 ELSE 5.0 END"""

IDENTITY_FP = """encode(sha256(convert_to(concat_ws(chr(31), 'identity', {t}.environment,
    {t}.kind, {t}.key), 'UTF8')), 'hex')"""

MOVE = f"""
INSERT INTO findings_finding (
    id, team_id, kind, category, source, fingerprint, title, severity, severity_score, state,
    justification, response, detail, evidence, first_seen, last_seen, resolved_at,
    auto_resolved, created_at, updated_at, environment, service_id, project_id,
    project_version_id, component_id, certificate_id, identity_id, spiffe_id, component_key,
    component_purl, component_name, component_version, ecosystem, package_name, advisory_id,
    vuln_id, aliases, cve_id, match_status, match_reason, fixed_versions, cvss_score, in_kev,
    kev_date_added, epss, epss_percentile, vex_evidence)
SELECT id, team_id, 'vulnerability', '', source, fingerprint, title, severity, severity_score,
    state, justification, response, detail, '{{}}'::jsonb, first_seen, last_seen, resolved_at,
    auto_resolved, created_at, updated_at, '', NULL, project_id, project_version_id,
    component_id, NULL, NULL, '', component_key, component_purl, component_name,
    component_version, ecosystem, package_name, advisory_id, vuln_id, aliases, cve_id,
    match_status, match_reason, fixed_versions, cvss_score, in_kev, kev_date_added, epss,
    epss_percentile, vex_evidence
FROM vulns_finding ORDER BY id;

SELECT setval(pg_get_serial_sequence('findings_finding', 'id'),
              COALESCE((SELECT max(id) FROM findings_finding), 0) + 1, false);

INSERT INTO findings_comment (id, finding_id, author_id, author_label, body, created_at)
SELECT id, finding_id, author_id, author_label, body, created_at FROM vulns_findingcomment
ORDER BY id;

SELECT setval(pg_get_serial_sequence('findings_comment', 'id'),
              COALESCE((SELECT max(id) FROM findings_comment), 0) + 1, false);

INSERT INTO findings_auditevent (
    team_id, finding_id, subject_type, subject_id, environment, action, actor_kind,
    actor_user_id, actor_key_id, actor_label, before, after, reason, created_at)
SELECT e.team_id, f.id,
    CASE WHEN f.id IS NULL THEN e.subject_type ELSE '' END,
    CASE WHEN f.id IS NULL THEN e.subject_id::text ELSE '' END,
    '', e.action,
    CASE WHEN e.actor_id IS NOT NULL THEN 'user'
         WHEN e.actor_label LIKE 'api-key:%' THEN 'api_key' ELSE 'system' END,
    e.actor_id, NULL, e.actor_label, e.before, e.after, e.reason, e.created_at
FROM vulns_auditevent e
LEFT JOIN findings_finding f ON e.subject_type = 'vulns.finding' AND f.id = e.subject_id
ORDER BY e.created_at, e.id;

INSERT INTO findings_finding (
    team_id, kind, category, source, fingerprint, title, severity, severity_score, state,
    justification, response, detail, evidence, first_seen, last_seen, resolved_at,
    auto_resolved, created_at, updated_at, environment, service_id, project_id,
    project_version_id, component_id, certificate_id, identity_id, spiffe_id, component_key,
    component_purl, component_name, component_version, ecosystem, package_name, advisory_id,
    vuln_id, aliases, cve_id, match_status, match_reason, fixed_versions, cvss_score, in_kev,
    kev_date_added, epss, epss_percentile, vex_evidence)
SELECT i.team_id, 'identity', i.kind,
    CASE WHEN i.kind = 'policy_violation' THEN 'policy' ELSE 'certificate' END,
    {IDENTITY_FP.format(t="i")}, i.title,
    CASE WHEN i.severity IN ('critical', 'high', 'medium', 'low', 'none') THEN i.severity
         ELSE 'unknown' END,
    {SEVERITY_SCORE.format(col="i.severity")},
    CASE WHEN i.status = 'open' THEN 'in_triage' ELSE 'resolved' END,
    '', '[]'::jsonb, '', i.evidence, i.first_seen_at, i.last_seen_at, i.resolved_at,
    i.status <> 'open', i.first_seen_at, i.last_seen_at, i.environment, NULL, NULL, NULL, NULL,
    i.certificate_id, ii.id, i.spiffe_id, '', '', '', '', '', '', NULL, '', '{{}}', '', '', '',
    '[]'::jsonb, NULL, false, NULL, NULL, NULL, '{{}}'::jsonb
FROM identity_identityfinding i
LEFT JOIN identity_identity ii
    ON i.spiffe_id <> '' AND ii.team_id = i.team_id AND ii.environment = i.environment
   AND ii.spiffe_id = i.spiffe_id
ORDER BY i.id;

INSERT INTO findings_auditevent (
    team_id, finding_id, subject_type, subject_id, environment, action, actor_kind,
    actor_user_id, actor_key_id, actor_label, before, after, reason, created_at)
SELECT e.team_id, f.id,
    CASE WHEN e.finding_id IS NOT NULL THEN ''
         WHEN e.action = 'mapping_set' THEN 'identity.mapping'
         WHEN e.action LIKE 'policy_%' THEN 'identity.policy' ELSE 'identity' END,
    CASE WHEN e.finding_id IS NOT NULL THEN ''
         WHEN e.action = 'mapping_set' THEN left(coalesce(e.data->>'spiffe_id', ''), 255)
         ELSE left(coalesce(e.data->>'service_name', '') || '/'
                   || coalesce(e.data->>'namespace', ''), 255) END,
    e.environment,
    CASE e.action WHEN 'opened' THEN 'created' WHEN 'resolved' THEN 'auto_resolved'
                  ELSE e.action END,
    CASE WHEN e.actor LIKE 'api-key:%' THEN 'api_key'
         WHEN u.id IS NOT NULL THEN 'user' ELSE 'system' END,
    u.id, NULL, left(e.actor, 160),
    coalesce(e.data->'before', '{{}}'::jsonb),
    CASE WHEN e.data ? 'after' THEN e.data->'after' ELSE e.data - 'reason' END,
    coalesce(e.data->>'reason', ''), e.at
FROM identity_identityauditevent e
LEFT JOIN identity_identityfinding i ON i.id = e.finding_id
LEFT JOIN findings_finding f ON f.team_id = i.team_id AND f.fingerprint = {IDENTITY_FP.format(t="i")}
LEFT JOIN auth_user u ON u.username = e.actor
ORDER BY e.at, e.id;

WITH moved AS (
    INSERT INTO findings_finding (
        team_id, kind, category, source, fingerprint, title, severity, severity_score, state,
        justification, response, detail, evidence, first_seen, last_seen, resolved_at,
        auto_resolved, created_at, updated_at, environment, service_id, project_id,
        project_version_id, component_id, certificate_id, identity_id, spiffe_id,
        component_key, component_purl, component_name, component_version, ecosystem,
        package_name, advisory_id, vuln_id, aliases, cve_id, match_status, match_reason,
        fixed_versions, cvss_score, in_kev, kev_date_added, epss, epss_percentile,
        vex_evidence)
    SELECT env.team_id, 'reliability', 'broken_context', 'traces',
        encode(sha256(convert_to(concat_ws(chr(31), 'reliability', 'broken_context', env.name,
            caller.namespace, caller.name, callee.namespace, callee.name), 'UTF8')), 'hex'),
        'Lost trace context: ' || caller.name || ' → ' || callee.name, 'medium', 5.5,
        CASE WHEN b.status = 'open' THEN 'in_triage' ELSE 'resolved' END,
        '', '[]'::jsonb, '',
        jsonb_build_object('caller', caller.name, 'caller_namespace', caller.namespace,
                           'callee', callee.name, 'callee_namespace', callee.namespace,
                           'occurrences', b.occurrences, 'examples', b.examples),
        b.first_seen, b.last_seen, CASE WHEN b.status = 'open' THEN NULL ELSE b.last_seen END,
        b.status <> 'open', b.first_seen, b.last_seen, env.name, callee.id, NULL, NULL, NULL,
        NULL, NULL, '', '', '', '', '', '', '', NULL, '', '{{}}', '', '', '', '[]'::jsonb,
        NULL, false, NULL, NULL, NULL, '{{}}'::jsonb
    FROM runtime_brokencontextfinding b
    JOIN runtime_environment env ON env.id = b.environment_id
    JOIN runtime_service caller ON caller.id = b.caller_id
    JOIN runtime_service callee ON callee.id = b.callee_id
    ORDER BY b.id
    RETURNING id, team_id, state, title, first_seen
)
INSERT INTO findings_auditevent (
    team_id, finding_id, subject_type, subject_id, environment, action, actor_kind,
    actor_user_id, actor_key_id, actor_label, before, after, reason, created_at)
SELECT team_id, id, '', '', '', 'created', 'system', NULL, NULL,
    'system: migration to the one findings table', '{{}}'::jsonb,
    jsonb_build_object('state', state), title, first_seen
FROM moved;
"""


class Migration(migrations.Migration):
    dependencies = [
        ("findings", "0002_audit_append_only"),
        ("vulns", "0002_auditevent_append_only"),
        ("identity", "0001_initial"),
        ("runtime", "0001_initial"),
    ]
    # Reversing drops the new tables with 0001; the old ones are back (empty) by then.
    operations = [migrations.RunSQL(MOVE, migrations.RunSQL.noop)]
