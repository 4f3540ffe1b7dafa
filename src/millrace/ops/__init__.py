"""The operations layer: apps' drivers started, deployed, stopped, restarted, rolled back.

`ops.lifecycle` holds the verbs, `ops.deployed` the process of a deployed app, `ops.registry`
the records of deployed apps, `ops.driver_lock` the one-driver-per-app lock,
`ops.checkpoints` an app's checkpoints as operators and the monitor see them, and
`ops.class_archive_build` the class-data archive setup builds for Spark's drivers.
"""
