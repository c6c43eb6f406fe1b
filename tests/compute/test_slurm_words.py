"""Slurm's words read into the platform's: sstat's usage lines."""

from apps.compute.backends.base import JobUsage
from apps.compute.backends.slurm_words import slurm_seconds, steps_usage


def test_sstat_lines_are_summed_per_job():
    out = (
        "478.batch|1|cpu=00:00:01.500,energy=0,fs/disk=37459,mem=11608064,pages=0,vmem=2934\n"
        "478.0|4|cpu=1-00:00:24,energy=0,mem=871968768,gres/gpuutil=40,pages=0\n"
        "479.extern|1|\n"
        "480.0|2|cpu=02:03,mem=1024\n"
    )
    usage = steps_usage(out)
    assert usage["478"] == JobUsage(86400 + 24 + 1.5, 11608064 + 871968768, 40.0)
    assert usage["480"] == JobUsage(123.0, 1024, None)
    assert "479" not in usage
    assert slurm_seconds("bad") == 0.0
