from django.urls import path

from trustrank.findings import apis, audit_apis, group_apis, triage_apis

urlpatterns = [
    path("findings", apis.FindingListApi.as_view(), name="api-findings"),
    # Groups (by fix, by vulnerability): before the findings/<int:...> routes.
    path("findings/groups", group_apis.FindingGroupListApi.as_view(), name="api-finding-groups"),
    path(
        "findings/bulk-triage", triage_apis.BulkTriageApi.as_view(),
        name="api-findings-bulk-triage",
    ),
    path(
        "findings/bulk-triage/<int:job_id>",
        triage_apis.BulkTriageJobApi.as_view(),
        name="api-findings-bulk-triage-job",
    ),
    path("triage-policy", triage_apis.TriagePolicyApi.as_view(), name="api-triage-policy"),
    path("findings/<int:finding_id>", apis.FindingDetailApi.as_view(), name="api-finding"),
    path(
        "findings/<int:finding_id>/triage",
        triage_apis.FindingTriageApi.as_view(),
        name="api-finding-triage",
    ),
    path(
        "findings/<int:finding_id>/comments",
        triage_apis.FindingCommentApi.as_view(),
        name="api-finding-comments",
    ),
    # Audit log (audit_apis.py).
    path("audit-events", audit_apis.AuditEventListApi.as_view(), name="api-audit-events"),
]
