from django.apps import AppConfig


class FindingsConfig(AppConfig):
    name = "trustrank.findings"
    label = "findings"
    verbose_name = "Findings and audit"

    def ready(self) -> None:
        from trustrank.jobs.registry import JobKind, job_kind_register

        job_kind_register(
            JobKind(
                name="bulk_triage",
                model_path="findings.BulkTriageJob",
                handler="trustrank.findings.services.bulk.bulk_triage_job_handle",
                queued_max_per_team=10,
            )
        )
