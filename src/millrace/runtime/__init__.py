"""The runtime layer: what runs apps on the engine. For now, the foundation's demo."""
