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
        # A kept page of finding groups grouped again (trustrank/findings/group_kept.py).
        job_kind_register(
            JobKind(
                name="finding_groups",
                model_path="findings.FindingGroupsJob",
                handler="trustrank.ranking.services.group_jobs.finding_groups_job_handle",
                ready_field="not_before",
                atomic=True,
                batch_capable=True,
            )
        )
        from trustrank.notify.sources import notify_source_register

        # The notify worker expands these batches (a run's decision changes, KEV additions).
        notify_source_register(
            "ranking_run", "trustrank.ranking.services.notify_sources.ranking_run_events"
        )
        notify_source_register("kev", "trustrank.ranking.services.notify_sources.kev_added_events")
        from trustrank.findings.ranked import finding_ranks_counter_register
        from trustrank.ranking.ranks import ranks_of

        # Finding.rank / env_rank of a finding whose queryset did not annotate them.
        finding_ranks_counter_register(ranks_of)
