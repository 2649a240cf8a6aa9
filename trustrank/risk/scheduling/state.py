"""Cluster and workload as NumPy arrays, and the one place resources are taken and given back.

GPU state is `gpu_left[node, slot]` in thousandths of a GPU: 1000 is a free GPU, 0 a full
one. Nodes with fewer GPUs than the widest node pad their rows with 0, which no request can
use and which adds nothing to free-GPU sums, so no separate mask is needed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
import numpy.typing as npt

from trustrank.parsers.openb import OpenbNode, OpenbPod

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
MILLI = 1000


class OverAllocationError(RuntimeError):
    """A placement asked for more than a node has; always a bug in a strategy."""


@dataclass(frozen=True)
class Workload:
    """Pods as parallel arrays (index = pod), plus the shape types FGD caches by."""

    names: tuple[str, ...]
    cpu: IntArray
    mem: IntArray
    num_gpu: IntArray
    gpu_milli: IntArray
    qos: tuple[str, ...]
    gpu_spec: tuple[str, ...]
    creation: IntArray
    duration: IntArray
    # Pods with equal (cpu, mem, gpu_milli, num_gpu) leave a node in the same fragmentation
    # state, so FGD caches per type, not per pod.
    type_of: IntArray
    type_cpu: IntArray
    type_mem: IntArray
    type_gpu_milli: IntArray
    type_num_gpu: IntArray

    def __len__(self) -> int:
        return len(self.names)

    @property
    def gpu_demand(self) -> IntArray:
        """Per pod, GPU demand in thousandths of a GPU."""
        return self.num_gpu * self.gpu_milli

    def with_creation(self, *, creation: IntArray) -> Workload:
        return replace(self, creation=creation.astype(np.int64))

    def subset(self, *, indices: Sequence[int] | IntArray) -> Workload:
        idx = np.asarray(indices, dtype=np.int64)
        return workload_from_arrays(
            names=tuple(self.names[i] for i in idx),
            cpu=self.cpu[idx],
            mem=self.mem[idx],
            num_gpu=self.num_gpu[idx],
            gpu_milli=self.gpu_milli[idx],
            qos=tuple(self.qos[i] for i in idx),
            gpu_spec=tuple(self.gpu_spec[i] for i in idx),
            creation=self.creation[idx],
            duration=self.duration[idx],
        )


def workload_from_arrays(
    *,
    names: tuple[str, ...],
    cpu: IntArray,
    mem: IntArray,
    num_gpu: IntArray,
    gpu_milli: IntArray,
    qos: tuple[str, ...],
    gpu_spec: tuple[str, ...],
    creation: IntArray,
    duration: IntArray,
) -> Workload:
    keys = np.stack([cpu, mem, gpu_milli, num_gpu], axis=1)
    uniq, type_of = np.unique(keys, axis=0, return_inverse=True)
    return Workload(
        names=names,
        cpu=cpu.astype(np.int64),
        mem=mem.astype(np.int64),
        num_gpu=num_gpu.astype(np.int64),
        gpu_milli=gpu_milli.astype(np.int64),
        qos=qos,
        gpu_spec=gpu_spec,
        creation=creation.astype(np.int64),
        duration=duration.astype(np.int64),
        type_of=type_of.reshape(-1).astype(np.int64),
        type_cpu=uniq[:, 0].astype(np.int64),
        type_mem=uniq[:, 1].astype(np.int64),
        type_gpu_milli=uniq[:, 2].astype(np.int64),
        type_num_gpu=uniq[:, 3].astype(np.int64),
    )


def workload_from_pods(pods: Sequence[OpenbPod]) -> Workload:
    """Arrays from parsed pods. Duration: recorded run time (deletion − scheduled); pods that
    never ran in the trace (no scheduled_time) keep deletion − creation, the time they were
    wanted, so the timeline replay still asks for them."""
    durations = []
    for pod in pods:
        end = pod.deletion_time if pod.deletion_time is not None else pod.creation_time
        start = pod.scheduled_time if pod.scheduled_time is not None else pod.creation_time
        durations.append(max(1, end - start))
    return workload_from_arrays(
        names=tuple(p.name for p in pods),
        cpu=np.array([p.cpu_milli for p in pods], dtype=np.int64),
        mem=np.array([p.memory_mib for p in pods], dtype=np.int64),
        num_gpu=np.array([p.num_gpu for p in pods], dtype=np.int64),
        gpu_milli=np.array([p.gpu_milli for p in pods], dtype=np.int64),
        qos=tuple(p.qos for p in pods),
        gpu_spec=tuple(p.gpu_spec for p in pods),
        creation=np.array([p.creation_time for p in pods], dtype=np.int64),
        duration=np.array(durations, dtype=np.int64),
    )


@dataclass(frozen=True)
class ClusterSpec:
    names: tuple[str, ...]
    cpu: IntArray
    mem: IntArray
    gpus: IntArray
    models: tuple[str, ...]

    def __len__(self) -> int:
        return len(self.names)

    @property
    def gpu_capacity_milli(self) -> int:
        return int(self.gpus.sum()) * MILLI


def cluster_from_nodes(nodes: Sequence[OpenbNode]) -> ClusterSpec:
    return ClusterSpec(
        names=tuple(n.name for n in nodes),
        cpu=np.array([n.cpu_milli for n in nodes], dtype=np.int64),
        mem=np.array([n.memory_mib for n in nodes], dtype=np.int64),
        gpus=np.array([n.gpu for n in nodes], dtype=np.int64),
        models=tuple(n.model for n in nodes),
    )


@dataclass
class ClusterState:
    """Mutable free resources; `version[n]` bumps whenever node n changes (FGD's cache key)."""

    spec: ClusterSpec
    cpu_free: IntArray
    mem_free: IntArray
    gpu_left: IntArray
    version: IntArray
    present: npt.NDArray[np.bool_]  # slot < the node's GPU count
    # affinity[n, g]: running GPU pods on node n asking g thousandths per GPU (GPU
    # clustering's affinity); affinity_kinds[n]: how many distinct g are there.
    affinity: npt.NDArray[np.int32]
    affinity_kinds: IntArray
    # Per-node summaries of gpu_left kept in step with it, so the per-pod feasibility test
    # is a few 1-D comparisons instead of a pass over every GPU slot.
    max_left: IntArray
    full_count: IntArray
    free_total: IntArray

    @classmethod
    def empty(cls, spec: ClusterSpec) -> ClusterState:
        width = max(1, int(spec.gpus.max()) if len(spec) else 1)
        slots = np.arange(width)[None, :]
        gpu_left = np.where(slots < spec.gpus[:, None], MILLI, 0).astype(np.int64)
        return cls(
            spec=spec,
            cpu_free=spec.cpu.copy(),
            mem_free=spec.mem.copy(),
            gpu_left=gpu_left,
            version=np.zeros(len(spec), dtype=np.int64),
            present=slots < spec.gpus[:, None],
            affinity=np.zeros((len(spec), MILLI + 1), dtype=np.int32),
            affinity_kinds=np.zeros(len(spec), dtype=np.int64),
            max_left=gpu_left.max(axis=1),
            full_count=(gpu_left >= MILLI).sum(axis=1),
            free_total=gpu_left.sum(axis=1),
        )

    @property
    def gpu_free_milli(self) -> int:
        return int(self.free_total.sum())

    def feasible(
        self, *, cpu: int, mem: int, gpu_milli: int, num_gpu: int
    ) -> npt.NDArray[np.bool_]:
        """Nodes where the request fits: CPU, memory, and enough GPUs each with room."""
        ok = (self.cpu_free >= cpu) & (self.mem_free >= mem)
        if num_gpu == 1:
            ok &= self.max_left >= gpu_milli
        elif num_gpu > 1:
            # Multi-GPU requests are whole GPUs (the parser enforces it).
            ok &= self.full_count >= num_gpu
        return ok

    def fits_anywhere(
        self, *, cpu: IntArray, mem: IntArray, gpu_milli: IntArray, num_gpu: IntArray
    ) -> npt.NDArray[np.bool_]:
        """For many requests at once: does each fit on at least one node?"""
        if len(cpu) == 0:
            return np.zeros(0, dtype=bool)
        # Requests repeat (a trace has ~150 shapes), so test each distinct one once.
        keys = np.stack([cpu, mem, gpu_milli, num_gpu], axis=1)
        shapes, back = np.unique(keys, axis=0, return_inverse=True)
        c, m, g, k = (shapes[:, i, None] for i in range(4))
        gpu_ok = (k == 0) | ((k == 1) & (self.max_left >= g)) | ((k > 1) & (self.full_count >= k))
        ok = (self.cpu_free >= c) & (self.mem_free >= m) & gpu_ok
        return ok.any(axis=1)[back.reshape(-1)]

    def _summarise(self, node: int) -> None:
        row = self.gpu_left[node]
        self.max_left[node] = row.max()
        self.full_count[node] = int((row >= MILLI).sum())
        self.free_total[node] = row.sum()
        self.version[node] += 1

    def gpus_for(self, *, node: int, gpu_milli: int, num_gpu: int, slot: int | None) -> list[int]:
        """The GPU slots a placement takes. Whole GPUs are interchangeable, so the first free
        ones; a shared request goes to `slot` when the strategy picked one."""
        if num_gpu == 0:
            return []
        row = self.gpu_left[node]
        if gpu_milli >= MILLI or slot is None:
            candidates = np.flatnonzero(row >= gpu_milli)[:num_gpu]
            return [int(c) for c in candidates]
        return [slot]

    def allocate(
        self, *, node: int, cpu: int, mem: int, gpu_milli: int, gpus: Sequence[int]
    ) -> None:
        if self.cpu_free[node] < cpu or self.mem_free[node] < mem:
            raise OverAllocationError(f"node {node}: CPU or memory over-allocated")
        for g in gpus:
            if self.gpu_left[node, g] < gpu_milli:
                raise OverAllocationError(f"node {node} GPU {g}: over-allocated")
        self.cpu_free[node] -= cpu
        self.mem_free[node] -= mem
        for g in gpus:
            self.gpu_left[node, g] -= gpu_milli
        self._summarise(node)
        if gpus:
            if self.affinity[node, gpu_milli] == 0:
                self.affinity_kinds[node] += 1
            self.affinity[node, gpu_milli] += 1

    def release(
        self, *, node: int, cpu: int, mem: int, gpu_milli: int, gpus: Sequence[int]
    ) -> None:
        self.cpu_free[node] += cpu
        self.mem_free[node] += mem
        for g in gpus:
            if self.gpu_left[node, g] + gpu_milli > MILLI:
                raise OverAllocationError(f"node {node} GPU {g}: released more than taken")
            self.gpu_left[node, g] += gpu_milli
        self._summarise(node)
        if gpus:
            self.affinity[node, gpu_milli] -= 1
            if self.affinity[node, gpu_milli] == 0:
                self.affinity_kinds[node] -= 1
