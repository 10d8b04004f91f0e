"""Figures: pure derivations, a Sample or Frame in and figures out — windows, engine stats, SLO,
cost, headroom, capacity, alerts, findings, the verdict and the timeline. No I/O here."""
