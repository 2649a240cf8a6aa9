"""Alibaba `cluster-trace-gpu-v2023` (`openb`) pod and node CSVs -> frozen records.

Pods: `name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,
deletion_time,scheduled_time` (times in seconds; `scheduled_time` empty for pods that never
ran). Nodes: `sn,cpu_milli,memory_mib,gpu,model`. `gpu_milli` is the share of *one* GPU in
thousandths; a pod asking for more than one GPU asks for whole GPUs (`gpu_milli` 1000).
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass

POD_COLUMNS = (
    "name",
    "cpu_milli",
    "memory_mib",
    "num_gpu",
    "gpu_milli",
    "gpu_spec",
    "qos",
    "pod_phase",
    "creation_time",
    "deletion_time",
    "scheduled_time",
)
NODE_COLUMNS = ("sn", "cpu_milli", "memory_mib", "gpu", "model")
# Decoded size cap: the real pod list is ~0.6 MB; a 64 MB file is a mistake, not a trace.
MAX_BYTES = 64 * 1024 * 1024


class OpenbError(ValueError):
    """A bad openb file; the message names the line (1-based, header is line 1) and column."""


@dataclass(frozen=True)
class OpenbPod:
    name: str
    cpu_milli: int
    memory_mib: int
    num_gpu: int
    gpu_milli: int  # per GPU, 0..1000
    gpu_spec: str  # GPU model constraint ("" = any; several models separated by "|")
    qos: str
    pod_phase: str
    creation_time: int
    deletion_time: int | None
    scheduled_time: int | None

    @property
    def gpu_request_milli(self) -> int:
        """Total GPU demand in thousandths of a GPU."""
        return self.num_gpu * self.gpu_milli


@dataclass(frozen=True)
class OpenbNode:
    name: str
    cpu_milli: int
    memory_mib: int
    gpu: int
    model: str


def _rows(
    data: bytes | str, columns: tuple[str, ...], what: str
) -> list[tuple[int, dict[str, str]]]:
    if isinstance(data, bytes):
        if len(data) > MAX_BYTES:
            raise OpenbError(f"{what}: file larger than {MAX_BYTES} bytes")
        try:
            text = data.decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            raise OpenbError(f"{what}: not UTF-8 text (byte {exc.start})") from exc
    else:
        text = data
    reader = csv.reader(io.StringIO(text))
    try:
        header = next(reader)
    except StopIteration:
        raise OpenbError(f"{what}: empty file, expected a header line") from None
    header = [h.strip() for h in header]
    missing = [c for c in columns if c not in header]
    if missing:
        raise OpenbError(
            f"{what}: line 1: missing column(s) {', '.join(missing)}; expected {','.join(columns)}"
        )
    index = {name: header.index(name) for name in columns}
    out = []
    for row in reader:
        line = reader.line_num
        if not row or all(not cell.strip() for cell in row):
            continue
        if len(row) < len(header):
            raise OpenbError(
                f"{what}: line {line}: {len(row)} fields, the header has {len(header)}"
            )
        out.append((line, {name: row[i].strip() for name, i in index.items()}))
    return out


def _int(
    value: str,
    *,
    what: str,
    line: int,
    column: str,
    minimum: int = 0,
    maximum: int | None = None,
) -> int:
    try:
        number = int(value)
    except ValueError:
        raise OpenbError(
            f"{what}: line {line}, column {column}: {value!r} is not an integer"
        ) from None
    if number < minimum or (maximum is not None and number > maximum):
        bound = f"{minimum}..{maximum}" if maximum is not None else f">= {minimum}"
        raise OpenbError(f"{what}: line {line}, column {column}: {number} is not in {bound}")
    return number


def _optional_int(value: str, *, what: str, line: int, column: str) -> int | None:
    return None if value == "" else _int(value, what=what, line=line, column=column)


def parse_openb_pods(data: bytes | str, *, what: str = "pods") -> tuple[OpenbPod, ...]:
    """Parse a pod list; raises OpenbError naming the line and column of the first problem."""
    pods = []
    for line, row in _rows(data, POD_COLUMNS, what):
        num_gpu = _int(row["num_gpu"], what=what, line=line, column="num_gpu", maximum=64)
        gpu_milli = _int(row["gpu_milli"], what=what, line=line, column="gpu_milli", maximum=1000)
        if num_gpu == 0 and gpu_milli != 0:
            raise OpenbError(f"{what}: line {line}, column gpu_milli: {gpu_milli} with num_gpu 0")
        if num_gpu > 0 and gpu_milli == 0:
            raise OpenbError(f"{what}: line {line}, column gpu_milli: 0 with num_gpu {num_gpu}")
        if num_gpu > 1 and gpu_milli != 1000:
            # Only single-GPU requests may share a GPU: multi-GPU pods take whole GPUs.
            raise OpenbError(
                f"{what}: line {line}, column gpu_milli: {gpu_milli} with num_gpu {num_gpu}; "
                "multi-GPU requests must be whole GPUs (1000)"
            )
        creation = _int(row["creation_time"], what=what, line=line, column="creation_time")
        deletion = _optional_int(row["deletion_time"], what=what, line=line, column="deletion_time")
        scheduled = _optional_int(
            row["scheduled_time"], what=what, line=line, column="scheduled_time"
        )
        if deletion is not None and deletion < creation:
            raise OpenbError(
                f"{what}: line {line}, column deletion_time: {deletion} is before "
                f"creation_time {creation}"
            )
        if not row["name"]:
            raise OpenbError(f"{what}: line {line}, column name: empty")
        pods.append(
            OpenbPod(
                name=row["name"],
                cpu_milli=_int(row["cpu_milli"], what=what, line=line, column="cpu_milli"),
                memory_mib=_int(row["memory_mib"], what=what, line=line, column="memory_mib"),
                num_gpu=num_gpu,
                gpu_milli=gpu_milli,
                gpu_spec=row["gpu_spec"],
                qos=row["qos"],
                pod_phase=row["pod_phase"],
                creation_time=creation,
                deletion_time=deletion,
                scheduled_time=scheduled,
            )
        )
    if not pods:
        raise OpenbError(f"{what}: no pod rows after the header")
    return tuple(pods)


def parse_openb_nodes(data: bytes | str, *, what: str = "nodes") -> tuple[OpenbNode, ...]:
    """Parse a node list; raises OpenbError naming the line and column of the first problem."""
    nodes = []
    for line, row in _rows(data, NODE_COLUMNS, what):
        if not row["sn"]:
            raise OpenbError(f"{what}: line {line}, column sn: empty")
        nodes.append(
            OpenbNode(
                name=row["sn"],
                cpu_milli=_int(row["cpu_milli"], what=what, line=line, column="cpu_milli"),
                memory_mib=_int(row["memory_mib"], what=what, line=line, column="memory_mib"),
                gpu=_int(row["gpu"], what=what, line=line, column="gpu", maximum=64),
                model=row["model"],
            )
        )
    if not nodes:
        raise OpenbError(f"{what}: no node rows after the header")
    return tuple(nodes)
