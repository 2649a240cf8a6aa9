"""Cluster and GPU diagnoses (issue 11): pure functions from parsed telemetry and
Kubernetes state to `Diagnosis` records, plus workload priority recommendations.

No Django and no storage: callers (the cluster app's services) select the series and the
snapshot, call these, and reconcile the returned diagnoses into findings by their
`fingerprint`. docs/cluster.md says what each diagnosis needs.
"""
