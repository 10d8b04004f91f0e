"""The simulated edge: a pynvml with pynvml's own errors (nvml), engines that are real HTTP servers
on 127.0.0.1 (engine, traffic, formats), a DCGM exporter (dcgm) and the demo node (demo). Only the
CLI's demo/simulate commands, the tests and the benchmarks import it."""
