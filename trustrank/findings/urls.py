from django.urls import path

from trustrank.findings import audit_views, group_views, views

app_name = "findings"
urlpatterns = [
    path("findings/", views.finding_list_page, name="finding-list"),
    # Groups (by fix, by vulnerability): before the findings/<int:...> routes.
    path("findings/groups/", group_views.finding_groups_page, name="finding-groups"),
    path("findings/<int:finding_id>/", views.finding_page, name="finding"),
    path("findings/<int:finding_id>/triage", views.finding_triage_submit, name="finding-triage"),
    path("findings/<int:finding_id>/comment", views.finding_comment_submit, name="finding-comment"),
    # Audit log (audit_views.py).
    path("audit/", audit_views.audit_log_page, name="audit-log"),
    path("audit/chain/", audit_views.audit_chain_status, name="audit-chain"),
]
