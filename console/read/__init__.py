"""Sources: what one poll reads (NVML, engine pages, the kubelet, discovery) into a Sample, and
the two FrameSources — the live console's and a recording's replay. No derivation here."""
