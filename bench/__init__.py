"""Side-by-side benchmarks: privcal vs netcal and torchmetrics (``python -m bench.run_all``)."""
