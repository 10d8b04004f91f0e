"""Shipped YAML data (engine metric maps, GPU catalog). Found via importlib.resources."""
