from django.apps import AppConfig


class ExportsConfig(AppConfig):
    name = "trustrank.exports"
    label = "exports"
    verbose_name = "Exports of findings"

    def ready(self) -> None:
        from trustrank.jobs.registry import JobKind, job_kind_register

        job_kind_register(
            JobKind(
                name="export",
                model_path="exports.Export",
                handler="trustrank.exports.services.run.export_run_handle",
                cleanup="trustrank.exports.services.run.export_job_cleanup",
                batch_capable=True,
                queued_max_per_team=10,
            )
        )
