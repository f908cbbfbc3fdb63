"""Sharded screens on Slurm: ``zlbench slurm submit`` writes and submits a job array
(one task per host shard, each `zlbench batch --shard auto`), ``zlbench slurm status``
follows it. Nothing here imports torch, triton or flag_gems.
"""
