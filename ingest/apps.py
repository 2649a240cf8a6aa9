from django.apps import AppConfig


class IngestConfig(AppConfig):
    name = "ingest"
    label = "ingest"

    def ready(self) -> None:
        from trustrank.jobs.registry import JobKind, job_kind_register

        job_kind_register(
            JobKind(
                name="ingest",
                model_path="ingest.IngestJob",
                handler="ingest.services.ingest_job_handle",
                atomic="ingest.services.ingest_job_atomic",
                hide_internal_errors=True,
            )
        )
