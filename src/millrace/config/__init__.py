"""The bottom layer: settings, the workspace folder, durations, and where the JVM side lives."""
