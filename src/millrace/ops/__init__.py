"""The operations layer: deployed apps, their registry, driver lock and checkpoints."""
