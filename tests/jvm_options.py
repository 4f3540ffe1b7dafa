"""The JVM options of the Spark drivers that tests start as processes of their own.

Those drivers live for seconds or minutes: on 2 cores the JIT's optimizing tier (C2) costs
them more CPU than it gives back. tests/cli/test_lifecycle.py took 131 and 130 s with C1
only, against 151 and 159 s with both tiers. The test process's own JVM runs for the whole
suite, where C2 pays back (tests/sql took 145 s with both tiers, 173 s with C1 only), so the
root conftest sets `CHILD_JVM_OPTIONS` only once its workspace is located, and commands run in
the test process leave it out.
"""

CHILD_JVM_OPTIONS = "MILLRACE_SPARK_DRIVER_JAVA_OPTIONS"
CHILD_JVM_TIERED = "-XX:TieredStopAtLevel=1"
