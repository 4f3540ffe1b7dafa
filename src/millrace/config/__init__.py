"""The config layer: settings, the workspace and its paths, storage, local processes, /proc.

`config.workspace` names every file and folder of the workspace; `config.storage` reaches the
storage root of checkpoints and tables without Spark; durations, alert rules and where the
JVM side lives are here too.
"""
