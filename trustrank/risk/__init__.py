"""The pure engine: graph, trust decay, exposure, reachability, SSVC, scores, diagnoses.

No Django imports: everything here takes plain data and returns plain data."""
