"""Outputs: a Frame written for people and other tools — snapshot.md, bundles, the exporter's
page and rules, OTLP, the check plugin, dashboards, JSON documents and schemas."""
