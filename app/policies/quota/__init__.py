"""Claim quotas: per-namespace limits on DRA devices and capacity, checked at admission.

- `check.py`: the checks the pipeline registers (claims and templates; the translation about to
  be made), and the rules they follow (module docstring);
- `demand.py`: pods and workloads: what all of an object's pods will hold, against the
  namespace's limits and its native ResourceQuotas;
- `pods.py`: how many pods of a workload run at once, and what translation gives each;
- `shares.py`: capacity quotas (`maxCapacityPer...`), counted by `capacity.py` as the scheduler
  consumes capacity;
- `rules.py`: the policy's `quotas` entries, compiled once; `findings.py`: what a check found,
  as its answer.
"""
