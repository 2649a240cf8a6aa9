from django.apps import AppConfig


class NotifyConfig(AppConfig):
    name = "trustrank.notify"
    label = "notify"
    verbose_name = "Outbound notifications (webhooks)"

    def ready(self) -> None:
        from trustrank.jobs.registry import JobKind, job_kind_register

        job_kind_register(
            JobKind(
                name="notify_dispatch",
                model_path="notify.NotifyBatch",
                handler="trustrank.notify.services.dispatch.notify_dispatch_handle",
                ready_field="ready_at",
            )
        )
