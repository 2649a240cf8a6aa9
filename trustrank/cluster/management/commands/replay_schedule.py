"""Replay a pod/node trace through placement strategies or priority policies, in-process."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from trustrank.cluster import services
from trustrank.cluster.models import Cluster
from trustrank.risk.scheduling.strategies import STRATEGIES
from trustrank.risk.scheduling.timeline import POLICIES


class Command(BaseCommand):
    help = (
        "Replay an Alibaba openb-format trace (default: the bundled openb files) or a team's "
        "stored cluster (--cluster NAME --team T) in inflation mode (unallocated GPUs per "
        "strategy, the FGD paper's method) or timeline mode (delay, priority violations, "
        "utilisation per priority policy). Bad input exits with status 2."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--pods", type=Path, help="openb pods CSV (default: bundled openb)")
        parser.add_argument("--nodes", type=Path, help="openb nodes CSV")
        parser.add_argument(
            "--cluster",
            help="replay this cluster's stored pods and nodes (instead of --pods/--nodes); "
            "the semantic-aware policy follows its recommended priorities and diagnoses",
        )
        parser.add_argument("--team", help="the team whose cluster --cluster names")
        parser.add_argument("--mode", choices=["inflation", "timeline"], default="inflation")
        parser.add_argument(
            "--strategy",
            action="append",
            choices=STRATEGIES,
            default=[],
            help="repeatable; inflation: strategies to compare (default all); timeline: the "
            "placement strategy (default fgd)",
        )
        parser.add_argument("--policy", action="append", choices=POLICIES, default=[])
        parser.add_argument("--seeds", type=int, default=3)
        parser.add_argument(
            "--compress",
            type=float,
            default=1.0,
            help="timeline: squeeze inter-arrival times by this factor",
        )
        parser.add_argument(
            "--node-fraction", type=float, default=1.0, help="replay on this share of the nodes"
        )
        parser.add_argument(
            "--hints",
            type=Path,
            help="timeline: JSON file {pod name: {priority, diagnoses}} for the semantic-aware "
            "policy (default: a stand-in from the trace's QoS and GPU requests)",
        )
        parser.add_argument("--json", action="store_true", help="print one JSON object")

    def handle(self, *args: Any, **options: Any) -> None:
        strategies: list[str] = options["strategy"]
        mode: str = options["mode"]
        if mode == "timeline" and len(strategies) > 1:
            raise CommandError("timeline mode takes one --strategy (the placement)", returncode=2)
        if options["cluster"] and (options["pods"] or options["nodes"]):
            raise CommandError("--cluster replays a stored cluster: leave out --pods and --nodes",
                               returncode=2)
        if options["cluster"] and options["hints"]:
            raise CommandError(
                "--cluster: the semantic priorities are the cluster's recommendations; leave "
                "out --hints", returncode=2)
        if options["cluster"] and not options["team"]:
            raise CommandError("--cluster needs --team (clusters are named per team)",
                               returncode=2)
        try:
            hints = json.loads(Path(options["hints"]).read_bytes()) if options["hints"] else None
            params = services.replay_params_validate(
                mode=mode,
                strategies=strategies if mode == "inflation" else (),
                seeds=options["seeds"],
                policies=options["policy"],
                placement=strategies[0] if mode == "timeline" and strategies else "fgd",
                compress=options["compress"],
                node_fraction=options["node_fraction"],
                hints=hints,
            )
            if options["cluster"]:
                result = self._cluster(options["cluster"], options["team"], params)
            else:
                pods_csv = Path(options["pods"] or services.DEFAULT_PODS).read_bytes()
                nodes_csv = Path(options["nodes"] or services.DEFAULT_NODES).read_bytes()
                workload, spec = services.trace_load(pods_csv=pods_csv, nodes_csv=nodes_csv)
                result = services.replay_compute(params=params, workload=workload, spec=spec)
        except OSError as exc:
            raise CommandError(f"cannot read input: {exc}", returncode=2) from exc
        except json.JSONDecodeError as exc:
            raise CommandError(f"--hints is not JSON: {exc}", returncode=2) from exc
        except services.ReplayError as exc:
            raise CommandError(str(exc), returncode=2) from exc
        summary = services.replay_summary(result)
        if options["json"]:
            self.stdout.write(json.dumps(summary))
            return
        self.stdout.write(
            f"{result['mode']} replay: {result['trace']['pods']} pods, "
            f"{result['trace']['nodes']} nodes, {result['trace']['gpus']} GPUs "
            f"({result['seconds']:.1f} s)"
        )
        if result.get("semantic_source"):
            self.stdout.write(f"  semantic priorities: {result['semantic_source']}")
        for name, row in summary["strategies"].items():
            fields = ", ".join(f"{k}={v:.4g}" for k, v in row.items())
            self.stdout.write(f"  {name:20s} {fields}")
        if summary.get("fgd_reduction") is not None:
            self.stdout.write(f"  FGD reduction vs best other: {summary['fgd_reduction']:.1%}")

    def _cluster(self, name: str, team: str, params: services.ReplayParams) -> dict[str, Any]:
        cluster = (
            Cluster.objects.filter(name=name, team__name=team).select_related("team").first()
        )
        if cluster is None:
            raise services.ReplayError(f"--cluster: team {team!r} has no cluster named {name!r}")
        return services.replay_cluster_compute(cluster=cluster, params=params)
