"""Forms of the replay page: input validation only; the services do the work."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, cast

from django import forms
from django.utils.html import format_html

from trustrank.cluster.models import ReplayMode
from trustrank.risk.scheduling.strategies import STRATEGIES
from trustrank.risk.scheduling.timeline import POLICIES

STRATEGY_CHOICES = [(s, s.replace("_", " ")) for s in STRATEGIES]
POLICY_CHOICES = [(p, p.replace("_", " ")) for p in POLICIES]


OPENB_CHOICE = ("", "the openb trace (or the CSVs uploaded below)")


class ReplayRunForm(forms.Form):
    cluster = forms.ChoiceField(
        label="Input",
        choices=[OPENB_CHOICE],
        required=False,
        help_text="a cluster of your teams: its stored pods and nodes, and its recommended "
        "priorities and diagnoses for the semantic-aware policy",
    )
    mode = forms.ChoiceField(choices=ReplayMode.choices, initial=ReplayMode.INFLATION)
    strategies = forms.MultipleChoiceField(
        choices=STRATEGY_CHOICES,
        required=False,
        widget=forms.CheckboxSelectMultiple,
        help_text="inflation: strategies to compare (none ticked = all)",
    )
    seeds = forms.IntegerField(min_value=1, max_value=20, initial=3)
    policies = forms.MultipleChoiceField(
        choices=POLICY_CHOICES,
        required=False,
        widget=forms.CheckboxSelectMultiple,
        help_text="timeline: priority policies (none ticked = all)",
    )
    placement = forms.ChoiceField(choices=STRATEGY_CHOICES, initial="fgd")
    compress = forms.FloatField(
        min_value=0.001,
        initial=1.0,
        help_text="timeline: squeeze inter-arrival times (openb needs ~1000 to queue)",
    )
    node_fraction = forms.FloatField(
        min_value=0.001,
        max_value=1.0,
        initial=1.0,
        help_text="replay on this share of the nodes (timeline on openb: try 0.1)",
    )
    pods_file = forms.FileField(required=False, help_text="openb pods CSV (empty: bundled openb)")
    nodes_file = forms.FileField(required=False, help_text="openb nodes CSV")
    team = forms.CharField(max_length=120, required=False, help_text="if you are in several teams")

    def __init__(self, *args: Any, clusters: Iterable[str] = (), **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        names = sorted(set(clusters))
        field = cast(forms.ChoiceField, self.fields["cluster"])
        field.choices = [
            OPENB_CHOICE,
            # format_html: the name is escaped, the apostrophe is kept as typed.
            *((name, format_html("cluster {}'s stored pods and nodes", name)) for name in names),
        ]
