from __future__ import annotations

from django.apps import AppConfig


class JobsConfig(AppConfig):
    name = "trustrank.jobs"
    label = "jobs"
    verbose_name = "Jobs"
