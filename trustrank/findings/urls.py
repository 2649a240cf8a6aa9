from django.urls import path

from trustrank.findings import audit_views, group_views, triage_views, views

app_name = "findings"
urlpatterns = [
    path("findings/", views.finding_list_page, name="finding-list"),
    # Groups (by fix, by vulnerability): before the findings/<int:...> routes.
    path("findings/groups/", group_views.finding_groups_page, name="finding-groups"),
    path("findings/bulk-triage", triage_views.finding_bulk_triage_submit, name="bulk-triage"),
    path(
        "findings/bulk-triage/<int:job_id>/", triage_views.bulk_triage_job_page,
        name="bulk-triage-job",
    ),
    path("findings/triage-policy/", triage_views.triage_policy_page, name="triage-policy"),
    path("findings/<int:finding_id>/", views.finding_page, name="finding"),
    path("findings/<int:finding_id>/triage", views.finding_triage_submit, name="finding-triage"),
    path("findings/<int:finding_id>/comment", views.finding_comment_submit, name="finding-comment"),
    # Audit log (audit_views.py).
    path("audit/", audit_views.audit_log_page, name="audit-log"),
    path("audit/chain/", audit_views.audit_chain_status, name="audit-chain"),
]
