"""Is a pod an inference server? Such a pod answers requests someone waits for, so its
workload is latency-sensitive even when no trace names it.

Evidence, strongest first: the pod exports vLLM's own metrics (`vllm:*` series joined to
it by namespace/pod), one of its containers runs an inference server's image (vLLM, Hugging
Face TGI, NVIDIA Triton, SGLang), or its labels say so (a KServe InferenceService, a
component or role of inference / serving / predictor, an app named after such a server).
"""

from __future__ import annotations

import re
from collections.abc import Collection

from trustrank.parsers.kubernetes_objects import Pod

# A word of the image's repository path (registry and tag aside): vllm/vllm-openai,
# ghcr.io/huggingface/text-generation-inference, nvcr.io/nvidia/tritonserver, lmsysorg/sglang.
_SERVER = r"vllm|tgi|text-generation-inference|tritonserver|triton|sglang"
_IMAGE_WORD = re.compile(rf"(?:^|[/_.-])({_SERVER})(?:$|[/_.-])")
_ROLE_WORD = re.compile(r"(?:^|[-_.])(inference|serving|predictor|server)(?:$|[-_.])")
_APP_WORD = re.compile(rf"(?:^|[-_.])({_SERVER})(?:$|[-_.])")
INFERENCE_LABELS = ("serving.kserve.io/inferenceservice", "serving.kubeflow.org/inferenceservice")
ROLE_LABELS = ("app.kubernetes.io/component", "component", "workload-type", "workload.type",
               "role")
APP_LABELS = ("app.kubernetes.io/name", "app", "app.kubernetes.io/part-of")


def _repository(image: str) -> str:
    """The image's path without its tag or digest, lower case."""
    path = image.lower().split("@", 1)[0]
    head, _, tail = path.rpartition("/")
    return f"{head}/{tail.split(':', 1)[0]}" if head else tail.split(":", 1)[0]


def inference_signals(pod: Pod, *, vllm_pods: Collection[str] = ()) -> list[str]:
    """Why a pod looks like an inference server; empty when it does not. `vllm_pods`:
    "namespace/pod" of the pods that export vLLM metrics."""
    reasons = []
    if f"{pod.namespace}/{pod.name}" in vllm_pods:
        reasons.append("exports vLLM metrics")
    for image in pod.images:
        match = _IMAGE_WORD.search(_repository(image))
        if match:
            reasons.append(f"image {image}")
            break
    reasons.extend(f"label {key}" for key in INFERENCE_LABELS if key in pod.labels)
    for key in ROLE_LABELS:
        value = pod.labels.get(key, "").lower()
        if value and _ROLE_WORD.search(value):
            reasons.append(f"label {key}={value}")
    for key in APP_LABELS:
        value = pod.labels.get(key, "").lower()
        if value and _APP_WORD.search(value):
            reasons.append(f"label {key}={value}")
    return reasons
