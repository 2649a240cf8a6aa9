from django.apps import AppConfig


class ClusterConfig(AppConfig):
    name = "trustrank.cluster"
    label = "cluster"
    verbose_name = "Cluster scheduling"

    def ready(self) -> None:
        from trustrank.jobs.registry import JobKind, job_kind_register

        job_kind_register(
            JobKind(
                name="replay_run",
                model_path="cluster.ReplayRun",
                handler="trustrank.cluster.services.replay_runs.replay_run_handle",
                batch_capable=True,
                queued_max_per_team=10,
            )
        )
