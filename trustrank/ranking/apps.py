from django.apps import AppConfig


class RankingConfig(AppConfig):
    name = "trustrank.ranking"
    label = "ranking"
    verbose_name = "Contextual ranking"

    def ready(self) -> None:
        from trustrank.jobs.registry import JobKind, job_kind_register

        job_kind_register(
            JobKind(
                name="ranking_run",
                model_path="ranking.RankingRun",
                handler="trustrank.ranking.services.runs.ranking_run_handle",
                ready_field="not_before",
                batch_capable=True,
            )
        )
